/*
 * sq_depth.c - the send queue's depth holds for a chain posted in one call: eight RDMA
 * WRITEs chained in one ibv_post_send on a QP with max_send_wr 4 are refused ENOMEM with
 * *bad_wr at the fifth, the first four complete and land, nothing after them does (rxe and
 * mlx5 do the same); a batch of eight ibv_wr_rdma_write in one ibv_wr_complete is refused
 * ENOMEM too; a WR the library cannot take mid-chain is *bad_wr, those before it posted. tests/sq_depth.rs runs it with direct reach on and off.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include "verbs_common.h"

/* Up to `want` completions within a bounded number of polls; then a short look for more. */
static int drain(struct ibv_cq *cq, struct ibv_wc *wc, int want)
{
	int n = 0;
	for (long spins = 0; spins < 50000000 && n < want; spins++)
		n += ibv_poll_cq(cq, want - n, wc + n);
	for (long spins = 0; spins < 200000; spins++)
		n += ibv_poll_cq(cq, 1, wc + n);
	return n;
}

static const char *errname(int e)
{
	return e == 0 ? "0" : e == ENOMEM ? "ENOMEM" : e == EINVAL ? "EINVAL" : "other";
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_qp_init_attr_ex qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE };
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &qi), *b = ibv_create_qp_ex(ctx, &qi);
	if (!a || !b)
		return 5;
	printf("max_send_wr: %u\n", qi.cap.max_send_wr);
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	connect_rc(a, b->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	connect_rc(b, a->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	for (int i = 0; i < 512; i++)
		buf[i] = (char)(i * 7 + 1);

	struct ibv_sge sge[8];
	struct ibv_send_wr wr[8], *bad = NULL;
	memset(wr, 0, sizeof(wr));
	for (int i = 0; i < 8; i++) {
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)buf + 64 * i, .length = 64, .lkey = mr->lkey };
		wr[i] = (struct ibv_send_wr){ .wr_id = i + 1, .sg_list = &sge[i], .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
			.next = i < 7 ? &wr[i + 1] : NULL,
			.wr.rdma = { .remote_addr = (uintptr_t)buf + 4096 + 64 * i, .rkey = mr->rkey } };
	}
	int rc = ibv_post_send(a, wr, &bad);
	printf("post_send(8 chained): rc=%s bad_wr=%ld\n", errname(rc), bad ? (long)(bad - wr) : -1L);
	struct ibv_wc wc[16];
	int n = drain(cq, wc, 4);
	printf("completions: %d\n", n);
	for (int i = 0; i < n; i++)
		printf("wc: wr_id=%llu status=%d opcode=%d qp ok=%s\n", (unsigned long long)wc[i].wr_id,
		       wc[i].status, wc[i].opcode, wc[i].qp_num == a->qp_num ? "yes" : "no");
	int landed = !memcmp(buf + 4096, buf, 256), after = 0;
	for (int i = 256; i < 512; i++)
		after |= buf[4096 + i];
	printf("first four landed: %s, nothing after: %s\n", landed ? "yes" : "no", after ? "no" : "yes");

	/* A later call has the queue's four slots again. */
	rc = ibv_post_send(a, &wr[4], &bad);
	printf("post_send(4 chained): rc=%s\n", errname(rc));
	printf("completions: %d\n", drain(cq, wc, 4));

	/* A chain whose second WR this library refuses: the first is posted, *bad_wr the second. */
	wr[6].opcode = 0x7f;
	bad = NULL;
	rc = ibv_post_send(a, &wr[5], &bad);
	printf("post_send(bad second): rc=%s bad_wr=%ld\n", errname(rc), bad ? (long)(bad - wr) : -1L);
	n = drain(cq, wc, 1);
	printf("completions: %d, wr_id=%llu\n", n, n ? (unsigned long long)wc[0].wr_id : 0ULL);
	wr[6].opcode = IBV_WR_RDMA_WRITE;

	/* The same through ibv_wr_*: eight in one batch. */
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a);
	ibv_wr_start(qx);
	for (int i = 0; i < 8; i++) {
		qx->wr_id = 11 + i;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 4096 + 64 * i);
		ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 64 * i, 64);
	}
	rc = ibv_wr_complete(qx);
	printf("wr_complete(8): rc=%s\n", errname(rc));
	n = drain(cq, wc, 4);
	printf("completions: %s\n", n <= 4 ? "at most four" : "more than four");
	return 0;
}
