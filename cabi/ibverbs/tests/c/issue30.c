/*
 * issue30.c - what issue 30 found diverging from rxe, from C: the entry points loaders bind
 * (answering as libibverbs over rxe), ibv_create_qp_ex's send_ops_flags and create_flags
 * checked as rxe's provider checks them, max_inline_data rounded up as rxe rounds it (and an
 * inline SEND within it arriving), and a destroyed QP's unread async event dropped instead of
 * delivered with a NULL qp; a UD address handle from GID index 0 sending over IPv6. One line "name: result" per check; tests/issue30.rs compares.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "verbs_common.h"

static const char *errname(int e)
{
	switch (e) {
	case 0: return "0";
	case EINVAL: return "EINVAL";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EAGAIN: return "EAGAIN";
	default: return "other";
	}
}

#define SHOW_NULL(name, expr) do { errno = 0; void *p_ = (void *)(expr); \
	printf("%s: %s errno=%s\n", name, p_ ? "object" : "NULL", errname(errno)); } while (0)

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long spins = 0; spins < 200000000; spins++)
		if (ibv_poll_cq(cq, 1, wc) == 1)
			return 1;
	return 0;
}

static struct ibv_qp *qp_ex(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq,
			    enum ibv_qp_type type, uint32_t mask, uint32_t create_flags,
			    uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = { .send_cq = cq, .recv_cq = cq, .qp_type = type,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | mask, .pd = pd, .create_flags = create_flags,
		.send_ops_flags = ops };
	return ibv_create_qp_ex(ctx, &a);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);

	/* Entry points: as libibverbs answers over rxe. */
	SHOW_NULL("reg_dmabuf_mr", ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 0, IBV_ACCESS_LOCAL_WRITE));
	errno = 0;
	int rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	printf("rereg_mr(access): rc=%d errno=%s\n", rc, errname(errno));
	errno = 0;
	rc = ibv_rereg_mr(mr, 0, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	printf("rereg_mr(access without the flag): rc=%d errno=%s\n", rc, errname(errno));
	SHOW_NULL("import_pd", ibv_import_pd(ctx, 1));
	SHOW_NULL("import_mr", ibv_import_mr(pd, 1));
	SHOW_NULL("import_device(-1)", ibv_import_device(-1));
	int dup_fd = dup(ctx->cmd_fd);
	printf("dup(cmd_fd): %s\n", dup_fd >= 0 ? "ok" : "failed");
	SHOW_NULL("import_device(dup of cmd_fd)", ibv_import_device(dup_fd));
	close(dup_fd);
	printf("rate_to_mbps(100G): %d, mbps_to_ibv_rate(25781): %d, rate_to_mult(10G): %d\n",
	       ibv_rate_to_mbps(IBV_RATE_100_GBPS), mbps_to_ibv_rate(25781),
	       ibv_rate_to_mult(IBV_RATE_10_GBPS));

	/* send_ops_flags and create_flags: as rxe's check_qp_init_attr, no NULL wr_* pointer. */
	uint64_t rc_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
		IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	struct ibv_qp *q = qp_ex(ctx, pd, cq, IBV_QPT_RC, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0, rc_ops);
	printf("qp_ex(RC, send/write/read/atomics): %s\n", q ? "object" : "NULL");
	if (q)
		ibv_destroy_qp(q);
	SHOW_NULL("qp_ex(UC, ATOMIC_WRITE)", qp_ex(ctx, pd, cq, IBV_QPT_UC,
		  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_WRITE));
	SHOW_NULL("qp_ex(UC, SEND_WITH_INV)", qp_ex(ctx, pd, cq, IBV_QPT_UC,
		  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0, IBV_QP_EX_WITH_SEND_WITH_INV));
	SHOW_NULL("qp_ex(RC, TSO)", qp_ex(ctx, pd, cq, IBV_QPT_RC,
		  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0, IBV_QP_EX_WITH_TSO));
	SHOW_NULL("qp_ex(UD, RDMA_WRITE)", qp_ex(ctx, pd, cq, IBV_QPT_UD,
		  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0, IBV_QP_EX_WITH_RDMA_WRITE));
	q = qp_ex(ctx, pd, cq, IBV_QPT_RC, IBV_QP_INIT_ATTR_CREATE_FLAGS, 0, 0);
	printf("qp_ex(create_flags 0): %s\n", q ? "object" : "NULL");
	if (q)
		ibv_destroy_qp(q);
	SHOW_NULL("qp_ex(create_flags SCATTER_FCS)", qp_ex(ctx, pd, cq, IBV_QPT_RC,
		  IBV_QP_INIT_ATTR_CREATE_FLAGS, IBV_QP_CREATE_SCATTER_FCS, 0));

	/* max_inline_data 0 with one send SGE: rxe grants 16 bytes, and an inline SEND of them
	 * arrives. */
	struct ibv_qp_init_attr qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 0 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qi);
	printf("max_inline_data granted: %u\n", qi.cap.max_inline_data);
	struct ibv_qp *b = ibv_create_qp(pd, &qi);
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	connect_rc(a, b->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	connect_rc(b, a->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	printf("in order: %d\n", ibv_query_qp_data_in_order(a, IBV_WR_RDMA_WRITE, 0));
	struct ibv_sge rsge = { .addr = (uintptr_t)buf + 256, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	ibv_post_recv(b, &rwr, &rbad);
	char msg[16] = "sixteen bytes!!";
	struct ibv_sge sge = { .addr = (uintptr_t)msg, .length = 16 };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad;
	printf("post inline 16: rc=%s\n", errname(ibv_post_send(a, &wr, &bad)));
	struct ibv_wc wc[2];
	int got = poll_one(cq, &wc[0]) + poll_one(cq, &wc[1]);
	printf("completions: %d, statuses %d %d, received: %s\n", got, wc[0].status, wc[1].status,
	       buf + 256);

	/* A destroyed QP's unread async event: a WRITE with a bad rkey makes b's responder raise
	 * QP_ACCESS_ERR; b is destroyed before the event is read, so it is never delivered. */
	struct ibv_async_event ev;
	ibv_get_async_event(ctx, &ev); /* PORT_ACTIVE, queued at open */
	ibv_ack_async_event(&ev);
	sge.addr = (uintptr_t)buf; sge.length = 8; sge.lkey = mr->lkey;
	wr.opcode = IBV_WR_RDMA_WRITE; wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)buf; wr.wr.rdma.rkey = mr->rkey ^ 0x5a5a00;
	ibv_post_send(a, &wr, &bad);
	got = poll_one(cq, &wc[0]);
	printf("bad rkey: %d completion, status %s\n", got, ibv_wc_status_str(wc[0].status));
	ibv_destroy_qp(b);
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	int n = 0, nulls = 0;
	while (ibv_get_async_event(ctx, &ev) == 0) {
		n++;
		if (ev.element.qp == NULL)
			nulls++;
		ibv_ack_async_event(&ev);
	}
	printf("async events after destroy: %d, naming NULL: %d, then %s\n", n, nulls, errname(errno));

	/* A destroyed CQ's unread overrun event (IBV_EVENT_CQ_ERR) is not delivered either: more
	 * signaled WRITEs than the CQ holds, then the QP and the CQ destroyed before reading. */
	struct ibv_cq *small = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	int writes = small->cqe + 1;
	struct ibv_qp_init_attr xi = { .send_cq = small, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = writes, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1 } };
	struct ibv_qp *x = ibv_create_qp(pd, &xi), *y = ibv_create_qp(pd, &qi);
	connect_rc(x, y->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	connect_rc(y, x->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	wr.wr.rdma.rkey = mr->rkey;
	for (int i = 0; i < writes; i++)
		ibv_post_send(x, &wr, &bad);
	/* The overrun's CQ_ERR event makes async_fd readable (nothing is polled: the CQ stays
	 * full). */
	struct pollfd afd = { .fd = ctx->async_fd, .events = POLLIN };
	rc = poll(&afd, 1, 10000);
	printf("small cq overrun event queued: %s\n", rc == 1 ? "yes" : "no");
	ibv_destroy_qp(x);
	ibv_destroy_qp(y);
	ibv_destroy_cq(small);
	n = nulls = 0;
	while (ibv_get_async_event(ctx, &ev) == 0) {
		n++;
		if (ev.element.cq == NULL)
			nulls++;
		ibv_ack_async_event(&ev);
	}
	printf("async events after cq destroy: %d, naming NULL: %d, then %s\n", n, nulls,
	       errname(errno));

	/* A UD address handle from GID index 0 (IPv6 link-local), as rxe takes it: the datagram
	 * goes over IPv6, the receive's GRH area holds the IPv6 header, and the AH made from the
	 * completion answers from GID index 0 to the sender's link-local GID. */
	struct ibv_qp_init_attr ui = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *u1 = ibv_create_qp(pd, &ui), *u2 = ibv_create_qp(pd, &ui);
	struct ibv_qp *us[2] = { u1, u2 };
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr ua = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11 };
		ibv_modify_qp(us[i], &ua, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
		ua.qp_state = IBV_QPS_RTR;
		ibv_modify_qp(us[i], &ua, IBV_QP_STATE);
		ua.qp_state = IBV_QPS_RTS;
		ibv_modify_qp(us[i], &ua, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	union ibv_gid g0;
	ibv_query_gid(ctx, 1, 0, &g0);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
		.grh = { .dgid = g0, .sgid_index = 0, .hop_limit = 64, .flow_label = 0x12345 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	printf("ah from gid 0: %s\n", ah ? "object" : "NULL");
	memset(buf + 512, 0, 128);
	rsge.addr = (uintptr_t)buf + 512; rsge.length = 128;
	rwr.wr_id = 7;
	ibv_post_recv(u2, &rwr, &rbad);
	strcpy(buf, "over ipv6");
	sge.addr = (uintptr_t)buf; sge.length = 10; sge.lkey = mr->lkey;
	struct ibv_send_wr uw = { .wr_id = 8, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED, .wr.ud = { .ah = ah, .remote_qpn = u2->qp_num,
		.remote_qkey = 0x11 } };
	printf("post ud: rc=%s\n", ah ? errname(ibv_post_send(u1, &uw, &bad)) : "no ah");
	got = poll_one(cq, &wc[0]) + poll_one(cq, &wc[1]);
	struct ibv_wc *rw = wc[0].opcode == IBV_WC_RECV ? &wc[0] : &wc[1];
	unsigned char *grh = (unsigned char *)buf + 512;
	printf("ud completions: %d, recv status %d byte_len %u grh %s, ip version %d, "
	       "source gid 0: %s, data: %s\n", got, rw->status, rw->byte_len,
	       rw->wc_flags & IBV_WC_GRH ? "yes" : "no", grh[0] >> 4,
	       memcmp(grh + 8, g0.raw, 16) ? "no" : "yes", (char *)grh + 40);
	struct ibv_ah_attr back;
	rc = ibv_init_ah_from_wc(ctx, 1, rw, (struct ibv_grh *)grh, &back);
	printf("init_ah_from_wc: rc=%d sgid_index %d dgid is gid 0: %s flow label %#x\n", rc,
	       back.grh.sgid_index, memcmp(back.grh.dgid.raw, g0.raw, 16) ? "no" : "yes",
	       back.grh.flow_label);
	if (ah)
		ibv_destroy_ah(ah);
	ibv_destroy_qp(u1);
	ibv_destroy_qp(u2);

	ibv_destroy_qp(a);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("still running\n");
	return 0;
}
