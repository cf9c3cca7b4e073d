/*
 * reg_mr.c - ibv_reg_mr pins as the kernel does (issue 29, item 13): memory that is not
 * mapped, or not mapped as the access flags need, is refused with EFAULT, length 0 with
 * EINVAL; a valid registration still works (an RDMA WRITE between two QPs lands in it).
 * Each check prints one line "name: result"; tests/reg_mr.rs compares them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "verbs_common.h"

#define REG(name, addr, len, acc) do { errno = 0; \
	struct ibv_mr *m_ = ibv_reg_mr(pd, (addr), (len), (acc)); \
	printf("%s: %s errno=%s\n", name, m_ ? "registered" : "refused", errname(errno)); \
	if (m_) ibv_dereg_mr(m_); } while (0)

static const char *errname(int e)
{
	switch (e) {
	case 0: return "0";
	case EINVAL: return "EINVAL";
	case EFAULT: return "EFAULT";
	default: return "other";
	}
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	long page = sysconf(_SC_PAGESIZE);
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

	REG("unmapped 0x10000", (void *)0x10000, 4096, rw);
	REG("NULL", NULL, 4096, rw);
	char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REG("length 0", two, 0, rw);
	munmap(two + page, page);
	REG("past the mapping's end", two + 100, page, rw);
	REG("inside the mapping", two, page, rw);
	char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REG("read-only, LOCAL_WRITE", ro, page, IBV_ACCESS_LOCAL_WRITE);
	REG("read-only, REMOTE_READ", ro, page, IBV_ACCESS_REMOTE_READ);
	char *none = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REG("PROT_NONE", none, page, IBV_ACCESS_REMOTE_READ);

	/* A valid registration works: a WRITE from QP a lands in b's registered page. */
	char *src = calloc(1, 64);
	strcpy(src, "landed");
	struct ibv_mr *smr = ibv_reg_mr(pd, src, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, two, page, rw);
	printf("lkey == rkey: %s\n", dmr && dmr->lkey == dmr->rkey ? "yes" : "no");
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qi), *b = ibv_create_qp(pd, &qi);
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	connect_rc(a, b->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	connect_rc(b, a->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = 7, .lkey = smr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)two + 200;
	wr.wr.rdma.rkey = dmr->rkey;
	printf("post_send: %d\n", ibv_post_send(a, &wr, &bad));
	struct ibv_wc wc;
	int n = 0;
	for (int spins = 0; n == 0 && spins < 100000000; spins++)
		n = ibv_poll_cq(cq, 1, &wc);
	printf("write: n=%d wr_id=%llu status=%s landed=%s\n", n, (unsigned long long)wc.wr_id,
	       ibv_wc_status_str(wc.status), two + 200);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("still running\n");
	return 0;
}
