/*
 * dreq_qp.c PORT: what the peer's DREQ does to a connected id's QP, in one process with two RC
 * ids on 127.0.0.1:PORT. The active side posts a receive and calls rdma_disconnect; the passive
 * side, which posted a receive too, reads DISCONNECTED and finds its QP still in RTS and its
 * receive still posted (nothing on its CQ), as with the kernel's CM and librdmacm over rxe:
 * neither touches a QP at the peer's DREQ; and no DREP has left yet (the active side has no
 * event). Its own rdma_disconnect then moves the QP to ERR, flushes the receive (every field
 * of the completion printed) and sends the DREP, and gives no second DISCONNECTED; the active
 * side's DISCONNECTED (status 0) and both TIMEWAIT_EXITs follow.
 * Every wait is bounded (10 s for an event or a completion).
 */
#include <poll.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "cm_common.h"

struct side {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[64];
};

static void make_qp(struct rdma_cm_id *id, struct side *s, uint64_t wr_id)
{
	struct ibv_qp_init_attr qa = { 0 };
	struct ibv_sge sge;
	struct ibv_recv_wr wr = { 0 }, *bad;

	CHECK(s->pd = ibv_alloc_pd(id->verbs));
	CHECK(s->cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0));
	CHECK(s->mr = ibv_reg_mr(s->pd, s->buf, sizeof s->buf, IBV_ACCESS_LOCAL_WRITE));
	qa.send_cq = qa.recv_cq = s->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	CHECK(rdma_create_qp(id, s->pd, &qa) == 0);
	sge.addr = (uintptr_t)s->buf;
	sge.length = sizeof s->buf;
	sge.lkey = s->mr->lkey;
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	CHECK(ibv_post_recv(id->qp, &wr, &bad) == 0);
}

static const char *qp_state(struct rdma_cm_id *id)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	CHECK(ibv_query_qp(id->qp, &a, IBV_QP_STATE, &ia) == 0);
	return a.qp_state == IBV_QPS_ERR ? "ERR" : a.qp_state == IBV_QPS_RTS ? "RTS" : "other";
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The CQ's one completion (within 10 s), every field printed; nothing after it. */
static void flushed(const char *who, struct rdma_cm_id *id, struct side *s)
{
	struct ibv_wc wc;
	double end = now_ms() + 10000;
	int n;

	memset(&wc, 0xa5, sizeof wc);
	while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0 && now_ms() < end)
		;
	CHECK(n == 1);
	printf("%s wc: wr_id %#llx status %s opcode %d vendor_err %u byte_len %u imm %u "
	       "own qp %s src_qp %u wc_flags %#x pkey_index %u slid %u sl %u dlid_path_bits %u\n",
	       who, (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode,
	       wc.vendor_err, wc.byte_len, wc.imm_data, wc.qp_num == id->qp->qp_num ? "yes" : "no",
	       wc.src_qp, wc.wc_flags, wc.pkey_index, wc.slid, wc.sl, wc.dlid_path_bits);
	printf("%s cq after it: %d\n", who, ibv_poll_cq(s->cq, 1, &wc));
}

/* The next CM event within 10 s, printed with the side it is for; acked. */
static void next_event(struct rdma_cm_id *act)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	CHECK(poll(&p, 1, 10000) == 1);
	CHECK(rdma_get_cm_event(ch, &e) == 0);
	printf("%s event %s, status %d\n", e->id == act ? "active" : "passive",
	       rdma_event_str(e->event), e->status);
	CHECK(rdma_ack_cm_event(e) == 0);
}

int main(int argc, char **argv)
{
	struct rdma_cm_id *listen, *act, *pas;
	struct rdma_cm_event *e;
	struct side a = { 0 }, p = { 0 };
	struct rdma_conn_param cp = { .retry_count = 7, .rnr_retry_count = 7 };
	struct ibv_wc wc;

	if (argc != 2) {
		fprintf(stderr, "usage: dreq_qp PORT\n");
		return 2;
	}
	loopback_pair(atoi(argv[1]), &listen, &act);
	make_qp(act, &a, 0xac);
	CHECK(rdma_connect(act, &cp) == 0);
	CHECK(rdma_get_cm_event(ch, &e) == 0);
	CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST);
	pas = e->id;
	CHECK(rdma_ack_cm_event(e) == 0);
	make_qp(pas, &p, 0x9a);
	CHECK(rdma_accept(pas, NULL) == 0);
	next_event(act);
	next_event(act);

	CHECK(rdma_disconnect(act) == 0);
	printf("active QP after its rdma_disconnect: %s\n", qp_state(act));
	flushed("active", act, &a);

	next_event(act);
	printf("passive QP at DISCONNECTED: %s\n", qp_state(pas));
	printf("passive cq at DISCONNECTED: %d\n", ibv_poll_cq(p.cq, 1, &wc));
	/* The DREP waits for the passive program, as the kernel's CM sends it at the program's
	 * rdma_disconnect: the active side's DISCONNECTED cannot be there yet (its DREQ's life is
	 * 74 s). A DREP sent when the DREQ was read would be on the channel already. */
	{
		struct pollfd q = { .fd = ch->fd, .events = POLLIN };

		printf("an event before the passive's rdma_disconnect: %s\n",
		       poll(&q, 1, 100) == 0 ? "none" : "yes");
	}
	CHECK(rdma_disconnect(pas) == 0);
	printf("passive QP after its rdma_disconnect: %s\n", qp_state(pas));
	flushed("passive", pas, &p);

	/* The active side's DISCONNECTED, then both timewaits' ends (in either order). */
	next_event(act);
	next_event(act);
	next_event(act);

	rdma_destroy_qp(act);
	rdma_destroy_qp(pas);
	rdma_destroy_id(act);
	rdma_destroy_id(pas);
	rdma_destroy_id(listen);
	ibv_dereg_mr(a.mr);
	ibv_dereg_mr(p.mr);
	ibv_destroy_cq(a.cq);
	ibv_destroy_cq(p.cq);
	ibv_dealloc_pd(a.pd);
	ibv_dealloc_pd(p.pd);
	rdma_destroy_event_channel(ch);
	printf("done\n");
	return 0;
}
