/*
 * fork.c - a child of fork() that destroys every verbs object it inherited (ibv_dereg_mr,
 * ibv_destroy_qp, ibv_close_device...) and exits leaves the parent's device alone, as
 * ibv_fork_init promises: the parent's QPs still connect and its WRITEs land and complete.
 * tests/fork.rs runs it with direct reach on and off.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "verbs_common.h"

static int one(struct ibv_qp *qp, struct ibv_cq *cq, enum ibv_wr_opcode op, char *from,
	       char *to, uint32_t lkey, uint32_t rkey, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)from, .length = 256, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)to, .rkey = rkey } }, *bad;
	if (ibv_post_send(qp, &wr, &bad))
		return -1;
	struct ibv_wc wc;
	int n = 0;
	for (long spins = 0; spins < 50000000 && n == 0; spins++)
		n = ibv_poll_cq(cq, 1, &wc);
	return n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == id ? 0 : -2;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 8192);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, acc);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qi), *b = ibv_create_qp(pd, &qi);
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	connect_rc(a, b->qp_num, gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	connect_rc(b, a->qp_num, gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	for (int i = 0; i < 256; i++)
		buf[i] = (char)(i * 3 + 1);
	printf("before fork: %s\n", one(a, cq, IBV_WR_RDMA_WRITE, buf, buf + 4096, mr->lkey, mr->rkey, 1) ? "failed" : "ok");
	pid_t child = fork();
	if (child == 0) {
		/* The child cleans up everything it inherited, then exits (atexit handlers run). */
		int rc = ibv_destroy_qp(a) | ibv_destroy_qp(b) | ibv_dereg_mr(mr) |
			 ibv_destroy_cq(cq) | ibv_dealloc_pd(pd) | ibv_close_device(ctx);
		exit(rc ? 7 : 0);
	}
	int status = 0;
	waitpid(child, &status, 0);
	printf("child: %s\n", WIFEXITED(status) ? (WEXITSTATUS(status) == 0 ? "exited 0" : "exited nonzero") : "killed");
	memset(buf + 1024, 0, 256);
	printf("after: write %s, read %s\n",
	       one(a, cq, IBV_WR_RDMA_WRITE, buf, buf + 2048, mr->lkey, mr->rkey, 2) ? "failed" : "ok",
	       one(b, cq, IBV_WR_RDMA_READ, buf + 1024, buf + 4096, mr->lkey, mr->rkey, 3) ? "failed" : "ok");
	printf("bytes: %s\n", !memcmp(buf, buf + 2048, 256) && !memcmp(buf, buf + 1024, 256) ? "ok" : "wrong");
	return 0;
}
