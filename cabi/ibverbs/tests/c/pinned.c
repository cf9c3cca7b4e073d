/*
 * pinned.c - a C program's registered memory as the kernel pins it, and reached as a Rust
 * program's owned MRs are (issue 29, Deliver 2 and 3). Two devices of one process
 * (softverbs0 sends, softverbs1 owns the target memory) reach each other through the same
 * files as two processes do. It prints what a program relies on; tests/pinned.rs compares
 * it, with direct reach on and off:
 * - a malloc'd buffer (heap pages shared with other objects) is WRITTEN and READ by the peer
 *   with its bytes, and its neighbours on the same pages keep theirs;
 * - a registered buffer the program unmaps (and maps something new over) still takes a
 *   remote WRITE, which completes with success as on rxe (the pinned pages take it; the new
 *   mapping does not see it), and a READ returns it; ibv_dereg_mr then succeeds;
 * - overlapping and repeated registrations of the same pages: deregistering one leaves the
 *   others working;
 * - fork() after registration: the child's writes do not reach the parent's registered
 *   pages, the child can use its heap, and the parent's MR still works.
 * tests/c/reach_stopped.c shows that a C program's MR is reached.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "verbs_common.h"

static struct ibv_qp *qa;
static struct ibv_cq *cqa;
static struct ibv_mr *src_mr;
static char *src;

/* One signaled WRITE or READ of `len` bytes between src+off and `to` (rkey); its status,
 * or -1 when none came within the bound. */
static int one(enum ibv_wr_opcode op, size_t off, void *to, uint32_t rkey, uint32_t len)
{
	static uint64_t id = 1;
	struct ibv_sge sge = { .addr = (uintptr_t)(src + off), .length = len, .lkey = src_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = ++id, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)to, .rkey = rkey } }, *bad;
	if (ibv_post_send(qa, &wr, &bad))
		return -2;
	struct ibv_wc wc;
	int n = 0;
	for (long spins = 0; spins < 200000000 && n == 0; spins++)
		n = ibv_poll_cq(cqa, 1, &wc);
	if (n != 1 || wc.wr_id != id)
		return -1;
	return wc.status;
}

static const char *st(int s)
{
	return s < 0 ? "none" : ibv_wc_status_str(s);
}

static void fill(char *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(i * 7 + seed);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *c0 = ibv_open_device(list[0]), *c1 = ibv_open_device(list[1]);
	ibv_free_device_list(list);
	struct ibv_pd *p0 = ibv_alloc_pd(c0), *p1 = ibv_alloc_pd(c1);
	cqa = ibv_create_cq(c0, 16, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(c1, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr qi = { .send_cq = cqa, .recv_cq = cqa, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	qa = ibv_create_qp(p0, &qi);
	qi.send_cq = qi.recv_cq = cqb;
	struct ibv_qp *qb = ibv_create_qp(p1, &qi);
	union ibv_gid g0, g1;
	ibv_query_gid(c0, 1, 1, &g0);
	ibv_query_gid(c1, 1, 1, &g1);
	int racc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	connect_rc(qa, qb->qp_num, g1, racc);
	connect_rc(qb, qa->qp_num, g0, racc);
	int acc = IBV_ACCESS_LOCAL_WRITE | racc;
	src = malloc(1 << 16);
	src_mr = ibv_reg_mr(p0, src, 1 << 16, IBV_ACCESS_LOCAL_WRITE);

	/* 1. A malloc'd buffer between two small heap objects, written and read by the peer. */
	char *before = strdup("the object before"), *tgt = malloc(3 * 4096), *after = strdup("the object after");
	memset(tgt, '.', 3 * 4096);
	struct ibv_mr *mr = ibv_reg_mr(p1, tgt, 3 * 4096, acc);
	printf("heap buffer: registered %s\n", mr ? "yes" : "no");
	fill(src, 8192, 1);
	int s = one(IBV_WR_RDMA_WRITE, 0, tgt + 100, mr->rkey, 8192);
	printf("write: %s, bytes %s\n", st(s), memcmp(tgt + 100, src, 8192) ? "wrong" : "ok");
	fill(tgt + 1000, 4096, 5);
	s = one(IBV_WR_RDMA_READ, 16384, tgt + 1000, mr->rkey, 4096);
	printf("read: %s, bytes %s\n", st(s), memcmp(tgt + 1000, src + 16384, 4096) ? "wrong" : "ok");
	printf("neighbours: %s, %s\n", before, after);
	printf("dereg: %d\n", ibv_dereg_mr(mr));
	printf("after dereg, the program's bytes: %s\n",
	       memcmp(tgt + 100, src, 900) || memcmp(tgt + 1000, src + 16384, 4096) || tgt[99] != '.' ? "wrong" : "ok");
	free(before);
	free(after);
	free(tgt);

	/* 2. The program unmaps a registered buffer and maps something new over it. */
	size_t len = 1 << 16;
	char *big = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(big, 'o', len);
	mr = ibv_reg_mr(p1, big, len, acc);
	printf("munmap: %d\n", munmap(big, len));
	fill(src, 4096, 9);
	s = one(IBV_WR_RDMA_WRITE, 0, big + 4096, mr->rkey, 4096);
	printf("write after munmap: %s\n", st(s));
	char *again = mmap(big, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	memset(again, 'Z', len);
	s = one(IBV_WR_RDMA_WRITE, 0, big + 8192, mr->rkey, 4096);
	printf("write into the old pages: %s, the new mapping %s\n", st(s),
	       again == big && again[8192] == 'Z' && again[4096] == 'Z' ? "untouched" : "changed");
	memset(src + 8192, 0, 4096);
	s = one(IBV_WR_RDMA_READ, 8192, big + 4096, mr->rkey, 4096);
	printf("read back: %s, bytes %s\n", st(s), memcmp(src + 8192, src, 4096) ? "wrong" : "ok");
	printf("dereg: %d\n", ibv_dereg_mr(mr));
	munmap(again, len);

	/* 3. Overlapping and repeated registrations of the same pages. */
	char *buf = malloc(4 * 4096);
	memset(buf, '-', 4 * 4096);
	struct ibv_mr *m1 = ibv_reg_mr(p1, buf, 8192, acc);
	struct ibv_mr *m2 = ibv_reg_mr(p1, buf + 4096, 8192, acc);
	struct ibv_mr *m3 = ibv_reg_mr(p1, buf + 4096, 8192, acc);
	struct ibv_mr *m4 = ibv_reg_mr(p1, buf, 4 * 4096, acc);
	printf("overlapping: %s\n", m1 && m2 && m3 && m4 ? "registered" : "refused");
	fill(src, 4096, 3);
	int s1 = one(IBV_WR_RDMA_WRITE, 0, buf + 5000, m2->rkey, 3000);
	int s2 = one(IBV_WR_RDMA_WRITE, 0, buf + 100, m1->rkey, 100);
	printf("writes: %s %s, bytes %s\n", st(s1), st(s2),
	       memcmp(buf + 5000, src, 3000) || memcmp(buf + 100, src, 100) ? "wrong" : "ok");
	printf("dereg m1: %d\n", ibv_dereg_mr(m1));
	fill(src, 4096, 4);
	s1 = one(IBV_WR_RDMA_WRITE, 0, buf + 4096, m3->rkey, 4096);
	s2 = one(IBV_WR_RDMA_WRITE, 0, buf + 12000, m4->rkey, 2000);
	printf("writes: %s %s, bytes %s\n", st(s1), st(s2),
	       memcmp(buf + 4096, src, 4096) || memcmp(buf + 12000, src, 2000) ? "wrong" : "ok");
	printf("dereg m3 m4: %d %d\n", ibv_dereg_mr(m3), ibv_dereg_mr(m4));
	memset(src + 8192, 0, 4096);
	s = one(IBV_WR_RDMA_READ, 8192, buf + 4096, m2->rkey, 4096);
	printf("read through m2: %s, bytes %s\n", st(s), memcmp(src + 8192, src, 4096) ? "wrong" : "ok");
	printf("dereg m2: %d\n", ibv_dereg_mr(m2));
	printf("the program's bytes: %s\n", memcmp(buf + 4096, src, 4096) || buf[0] != '-' ? "wrong" : "ok");
	free(buf);

	/* 4. fork() after registration. */
	char *fb = malloc(2 * 4096);
	memset(fb, 'p', 2 * 4096);
	mr = ibv_reg_mr(p1, fb, 2 * 4096, acc);
	pid_t child = fork();
	if (child == 0) {
		memset(fb, 'c', 2 * 4096);
		char *mine = malloc(100);
		strcpy(mine, "heap");
		free(mine);
		_exit(fb[4096] == 'c' ? 0 : 1);
	}
	int status = 0;
	waitpid(child, &status, 0);
	printf("fork child: %s\n", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "exited 0" : "failed");
	printf("parent's pages after the child wrote its own: %s\n", fb[0] == 'p' && fb[8191] == 'p' ? "untouched" : "changed");
	fill(src, 4096, 6);
	s = one(IBV_WR_RDMA_WRITE, 0, fb + 2048, mr->rkey, 4096);
	printf("write after fork: %s, bytes %s\n", st(s), memcmp(fb + 2048, src, 4096) ? "wrong" : "ok");
	printf("dereg: %d\n", ibv_dereg_mr(mr));
	free(fb);

	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_dereg_mr(src_mr);
	free(src);
	ibv_destroy_cq(cqa);
	ibv_destroy_cq(cqb);
	ibv_dealloc_pd(p0);
	ibv_dealloc_pd(p1);
	ibv_close_device(c0);
	ibv_close_device(c1);
	printf("done\n");
	return 0;
}
