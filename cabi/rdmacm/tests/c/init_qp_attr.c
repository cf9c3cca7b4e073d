/* rdma_init_qp_attr and rdma_establish, checked in one process (tests/qpattr.rs runs it):
 * a listener and a connecting id on one event channel, each side's QP made with ibv_create_qp
 * and moved by the program with the attributes rdma_init_qp_attr gives, as `rping -q` does.
 * Prints each state's mask and the fields that matter; "ok" where a value must equal the
 * other side's (QP numbers, PSNs, GIDs). Usage: init_qp_attr PORT */
#include "cm_common.h"

/* Ask for `state`'s attributes and apply them to `qp`. */
static void move(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state,
		 struct ibv_qp_attr *a, int *mask)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = state;
	CHECK(rdma_init_qp_attr(id, a, mask) == 0);
	CHECK(ibv_modify_qp(qp, a, *mask) == 0);
}

static struct ibv_qp *make_qp(struct rdma_cm_id *id, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(id->pd, &ia);

	CHECK(qp);
	return qp;
}

int main(int argc, char **argv)
{
	struct rdma_cm_id *listen, *act, *pas;
	struct ibv_qp_attr a, pas_rtr, pas_rts, act_rtr, act_rts;
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct ibv_cq *acq, *pcq;
	struct ibv_qp *aqp, *pqp;
	struct ibv_mr *amr, *pmr;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr = { .sg_list = &sge, .num_sge = 1 }, *bad_r;
	struct ibv_send_wr swr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED }, *bad_s;
	struct ibv_wc wc;
	char abuf[32] = "self-moved QPs", pbuf[32] = "";
	char gid[INET6_ADDRSTRLEN];
	int mask, n;

	if (argc != 2)
		return 2;
	loopback_pair(atoi(argv[1]), &listen, &act);

	/* Before any connection: INIT without remote access; RTR is refused. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	CHECK(rdma_init_qp_attr(act, &a, &mask) == 0);
	printf("before connect: INIT mask %#x access %#x pkey %u port %u\n", mask,
	       a.qp_access_flags, a.pkey_index, a.port_num);
	a.qp_state = IBV_QPS_RTR;
	n = rdma_init_qp_attr(act, &a, &mask);
	printf("before connect: RTR %d %s\n", n, errno == EINVAL ? "EINVAL" : "?");

	CHECK(acq = ibv_create_cq(act->verbs, 8, NULL, NULL, 0));
	aqp = make_qp(act, acq);
	move(act, aqp, IBV_QPS_INIT, &a, &mask);
	cp.qp_num = aqp->qp_num;
	CHECK(rdma_connect(act, &cp) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	CHECK(rdma_init_qp_attr(act, &a, &mask) == 0);
	printf("after connect: INIT mask %#x access %#x\n", mask, a.qp_access_flags);

	/* The passive side: its QP through INIT, RTR and RTS before rdma_accept. */
	pas = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(pcq = ibv_create_cq(pas->verbs, 8, NULL, NULL, 0));
	pqp = make_qp(pas, pcq);
	move(pas, pqp, IBV_QPS_INIT, &a, &mask);
	printf("passive INIT mask %#x access %#x pkey %u port %u\n", mask, a.qp_access_flags,
	       a.pkey_index, a.port_num);
	move(pas, pqp, IBV_QPS_RTR, &pas_rtr, &mask);
	inet_ntop(AF_INET6, pas_rtr.ah_attr.grh.dgid.raw, gid, sizeof(gid));
	printf("passive RTR mask %#x mtu %d dest_qp %s rq_psn %s max_dest_rd %u min_rnr %u "
	       "dgid %s sgid_index %u\n", mask, pas_rtr.path_mtu,
	       pas_rtr.dest_qp_num == aqp->qp_num ? "ok" : "wrong",
	       pas_rtr.rq_psn != 0 ? "ok" : "zero", pas_rtr.max_dest_rd_atomic,
	       pas_rtr.min_rnr_timer,
	       memcmp(pas_rtr.ah_attr.grh.dgid.raw, act->route.addr.addr.ibaddr.sgid.raw, 16) ?
	       gid : "ok", pas_rtr.ah_attr.grh.sgid_index);
	move(pas, pqp, IBV_QPS_RTS, &pas_rts, &mask);
	printf("passive RTS mask %#x sq_psn %s timeout %u retry %u rnr_retry %u max_rd %u\n",
	       mask, pas_rts.sq_psn ? "set" : "zero", pas_rts.timeout, pas_rts.retry_cnt,
	       pas_rts.rnr_retry, pas_rts.max_rd_atomic);
	CHECK(pmr = ibv_reg_mr(pas->pd, pbuf, sizeof(pbuf), IBV_ACCESS_LOCAL_WRITE));
	sge = (struct ibv_sge){ (uintptr_t)pbuf, sizeof(pbuf), pmr->lkey };
	CHECK(ibv_post_recv(pqp, &rwr, &bad_r) == 0);
	cp.qp_num = pqp->qp_num;
	CHECK(rdma_accept(pas, &cp) == 0);

	/* The active side: CONNECT_RESPONSE (no CM-made QP), its QP to RTS, then the RTU. */
	expect_status(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, "active");
	move(act, aqp, IBV_QPS_RTR, &act_rtr, &mask);
	printf("active RTR mask %#x dest_qp %s rq_psn %s\n", mask,
	       act_rtr.dest_qp_num == pqp->qp_num ? "ok" : "wrong",
	       act_rtr.rq_psn == pas_rts.sq_psn ? "ok" : "wrong");
	move(act, aqp, IBV_QPS_RTS, &act_rts, &mask);
	printf("active RTS mask %#x sq_psn %s\n", mask,
	       act_rts.sq_psn == pas_rtr.rq_psn ? "ok" : "wrong");
	CHECK(rdma_establish(act) == 0);
	expect_status(RDMA_CM_EVENT_ESTABLISHED, 0, "passive");
	n = rdma_establish(act);
	printf("rdma_establish again: %d %s\n", n, errno == EINVAL ? "EINVAL" : "?");

	/* A SEND over the self-moved QPs lands. */
	CHECK(amr = ibv_reg_mr(act->pd, abuf, sizeof(abuf), IBV_ACCESS_LOCAL_WRITE));
	sge = (struct ibv_sge){ (uintptr_t)abuf, sizeof(abuf), amr->lkey };
	CHECK(ibv_post_send(aqp, &swr, &bad_s) == 0);
	for (n = 0; n < 5000000 && ibv_poll_cq(pcq, 1, &wc) == 0; n++)
		;
	CHECK(n < 5000000 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV);
	printf("received: %s\n", pbuf);

	CHECK(rdma_disconnect(act) == 0);
	/* The passive side answers its DISCONNECTED with rdma_disconnect (its DREP, as with the
	 * kernel's CM): the active side's DISCONNECTED follows. */
	CHECK(expect(RDMA_CM_EVENT_DISCONNECTED) == pas);
	CHECK(rdma_disconnect(pas) == 0);
	CHECK(expect(RDMA_CM_EVENT_DISCONNECTED) == act);
	ibv_destroy_qp(aqp);
	ibv_destroy_qp(pqp);
	ibv_dereg_mr(amr);
	ibv_dereg_mr(pmr);
	ibv_destroy_cq(acq);
	ibv_destroy_cq(pcq);
	CHECK(rdma_destroy_id(pas) == 0);
	CHECK(rdma_destroy_id(act) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}
