/*
 * fork_open.c - a child of fork() that opens the device its parent has open gets a context of
 * its own (as Python's multiprocessing children do in rdma-core's pyverbs suite): its RC WRITE
 * between two of its QPs completes with its bytes, and the parent's device still works after.
 * tests/fork.rs runs it with direct reach on and off.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "verbs_common.h"

/* Open the first device, WRITE 256 bytes between two connected RC QPs on it, check them. */
static const char *write_on(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE |
					    IBV_ACCESS_REMOTE_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	if (!mr || !cq)
		return "no resources";
	struct ibv_qp *a = ibv_create_qp(pd, &qi), *b = ibv_create_qp(pd, &qi);
	if (!a || !b)
		return "no QPs";
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	connect_rc(a, b->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	connect_rc(b, a->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	for (int i = 0; i < 256; i++)
		buf[i] = (char)(i * 7 + getpid());
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 256, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)(buf + 4096), .rkey = mr->rkey } }, *bad;
	if (ibv_post_send(a, &wr, &bad))
		return "post failed";
	struct ibv_wc wc;
	int n = 0;
	for (long spins = 0; spins < 50000000 && n == 0; spins++)
		n = ibv_poll_cq(cq, 1, &wc);
	if (n != 1)
		return "no completion";
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 9 || wc.opcode != IBV_WC_RDMA_WRITE)
		return "a wrong completion";
	const char *r = memcmp(buf, buf + 4096, 256) ? "wrong bytes" : "ok";
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	return r;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	printf("parent before: %s\n", write_on(ctx));
	pid_t child = fork();
	if (child == 0) {
		struct ibv_context *mine = ibv_open_device(list[0]);
		union ibv_gid pg, cg;
		/* Its own port: an address of its own (two children on the parent's port shared
		 * one address, and the parent's NIC thread took their packets). */
		ibv_query_gid(ctx, 1, 1, &pg);
		int own = mine && !ibv_query_gid(mine, 1, 1, &cg) && memcmp(&pg, &cg, sizeof(pg));
		printf("child's port: %s\n", own ? "its own" : "the parent's");
		const char *r = mine ? write_on(mine) : "no context";
		printf("child: %s\n", r);
		ibv_close_device(mine);
		exit(strcmp(r, "ok") || !own ? 1 : 0);
	}
	int status = 0;
	waitpid(child, &status, 0);
	printf("child: %s\n", WIFEXITED(status) ? (WEXITSTATUS(status) == 0 ? "exited 0" : "exited nonzero") : "killed");
	printf("parent after: %s\n", write_on(ctx));
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
