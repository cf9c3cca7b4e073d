/* create_qp_ex.c: rdma_create_qp_ex reads struct ibv_qp_init_attr_ex as <infiniband/verbs.h>
 * lays it out (comp_mask right after sq_sig_all, in what is ibv_qp_init_attr's tail padding)
 * and, as librdmacm, takes the PD from it (IBV_QP_INIT_ATTR_PD) or from the id, makes the CQs
 * the attributes lack, and passes the other extended attributes to ibv_create_qp_ex. One
 * process: a loopback pair whose passive QP is made with IBV_QP_INIT_ATTR_PD alone (the
 * attributes librpma passes) and whose active QP asks for the ibv_wr_* API
 * (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: SEND); one SEND through ibv_wr_send arrives. An attribute
 * the device refuses (IBV_QP_INIT_ATTR_XRCD) is -1 with EOPNOTSUPP, as ibv_create_qp_ex
 * answers it, and leaves the id without a QP. Usage: create_qp_ex PORT */
#include <poll.h>
#include <infiniband/verbs.h>
#include "cm_common.h"

/* One completion of `cq` within 5 s. */
static struct ibv_wc one_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;

	for (int i = 0; i < 5000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);

		CHECK(n >= 0);
		if (n == 1)
			return wc;
		poll(NULL, 0, 1);
	}
	fprintf(stderr, "no completion within 5 s\n");
	exit(1);
}

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr_ex a = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_cm_id *listen, *act, *srv;
	char out[32] = "through ibv_wr_send", in[32] = { 0 };
	struct ibv_mr *omr, *imr;
	struct ibv_qp_ex *qx;
	struct ibv_pd *pd;
	struct ibv_wc wc;
	struct ibv_sge sge;
	int r;
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (argc < 2)
		return 2;
	loopback_pair(atoi(argv[1]), &listen, &act);
	CHECK(pd = ibv_alloc_pd(act->verbs));

	/* Refused by the device: nothing made. */
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD;
	a.pd = pd;
	errno = 0;
	r = rdma_create_qp_ex(act, &a);
	printf("XRCD: %d %s, qp %s\n", r, errno == EOPNOTSUPP ? "EOPNOTSUPP" : strerror(errno),
	       act->qp ? "made" : "none");

	/* The active QP with the ibv_wr_* API. */
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.send_ops_flags = IBV_QP_EX_WITH_SEND;
	a.send_cq = a.recv_cq = NULL;
	CHECK(rdma_create_qp_ex(act, &a) == 0);
	CHECK(act->qp && act->send_cq && act->recv_cq && act->pd == pd);
	CHECK(qx = ibv_qp_to_qp_ex(act->qp));
	CHECK(rdma_connect(act, NULL) == 0);

	/* The passive QP as librpma makes it: the PD alone, in the extended attributes. */
	srv = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	memset(&a, 0, sizeof a);
	a.qp_type = IBV_QPT_RC;
	a.cap = (struct ibv_qp_cap){ .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				     .max_recv_sge = 1 };
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	CHECK(rdma_create_qp_ex(srv, &a) == 0);
	CHECK(srv->qp && srv->pd == pd);
	CHECK(imr = ibv_reg_mr(pd, in, sizeof in, IBV_ACCESS_LOCAL_WRITE));
	sge = (struct ibv_sge){ (uintptr_t)in, sizeof in, imr->lkey };
	CHECK(ibv_post_recv(srv->qp, &rwr, &bad) == 0);
	CHECK(rdma_accept(srv, NULL) == 0);
	expect(RDMA_CM_EVENT_ESTABLISHED);
	expect(RDMA_CM_EVENT_ESTABLISHED);

	CHECK(omr = ibv_reg_mr(pd, out, sizeof out, 0));
	ibv_wr_start(qx);
	qx->wr_id = 9;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, omr->lkey, (uintptr_t)out, sizeof out);
	CHECK(ibv_wr_complete(qx) == 0);
	wc = one_wc(act->send_cq);
	printf("send: wr_id %llu, %s, opcode %s\n", (unsigned long long)wc.wr_id,
	       ibv_wc_status_str(wc.status), wc.opcode == IBV_WC_SEND ? "SEND" : "other");
	wc = one_wc(srv->recv_cq);
	printf("recv: wr_id %llu, %s, opcode %s, %u bytes: %s\n", (unsigned long long)wc.wr_id,
	       ibv_wc_status_str(wc.status), wc.opcode == IBV_WC_RECV ? "RECV" : "other",
	       wc.byte_len, in);

	CHECK(rdma_disconnect(act) == 0);
	expect(RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_disconnect(srv) == 0);
	expect(RDMA_CM_EVENT_DISCONNECTED);
	rdma_destroy_qp(act);
	rdma_destroy_qp(srv);
	CHECK(ibv_dereg_mr(omr) == 0);
	CHECK(ibv_dereg_mr(imr) == 0);
	CHECK(rdma_destroy_id(srv) == 0);
	CHECK(rdma_destroy_id(act) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	rdma_destroy_event_channel(ch);
	printf("done\n");
	return 0;
}
