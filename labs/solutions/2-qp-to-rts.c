/*
 * Lab 2: bring a QP to RTS (labs/2-qp-to-rts/README.md).
 * Write connect_qp: RESET -> INIT -> RTR -> RTS, each with its attributes and the mask naming
 * them. Then the program sends "hello" as lab 3 does, and each side prints its QP's state.
 *   cc -o lab2 lab.c -libverbs && softverbs labs check 2 ./lab2
 */
#include "../common/labkit.h"

static void connect_qp(struct side *s, uint32_t my_psn, const struct peer_info *peer)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	/* TODO(1): to INIT: qp_state, pkey_index 0, port_num 1, qp_access_flags
	 * (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ), and the mask naming each. */
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		lab_die("modify to INIT");
	memset(&a, 0, sizeof(a));
	/* TODO(2): to RTR: path_mtu IBV_MTU_1024, the peer's QPN (dest_qp_num) and first PSN
	 * (rq_psn), max_dest_rd_atomic 1, min_rnr_timer 12, and its address: a global route
	 * (is_global 1, grh.dgid = peer->gid, grh.sgid_index 0, hop_limit 1) on port 1. */
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		lab_die("modify to RTR");
	memset(&a, 0, sizeof(a));
	/* TODO(3): to RTS: sq_psn = my_psn, timeout 14, retry_cnt 7, rnr_retry 3,
	 * max_rd_atomic 1. */
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = my_psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 3;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		lab_die("modify to RTS");
	(void)s;
	(void)my_psn;
	(void)peer;
}

/* Print the QP's state as ibv_query_qp reports it. */
static void print_state(struct side *s)
{
	static const char *names[] = { "IBV_QPS_RESET", "IBV_QPS_INIT", "IBV_QPS_RTR",
				       "IBV_QPS_RTS", "IBV_QPS_SQD", "IBV_QPS_SQE",
				       "IBV_QPS_ERR" };
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	if (ibv_query_qp(s->qp, &a, IBV_QP_STATE, &init))
		lab_die("ibv_query_qp");
	printf("qp %s state=%s\n", s->name, a.qp_state <= IBV_QPS_ERR ? names[a.qp_state] : "?");
}

static int requester(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	lab_setup(&s, "requester", "softverbs0", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 1000, &peer);
	connect_qp(&s, 1000, &peer);
	print_state(&s);
	lab_await(sock); /* the responder's receive is posted */
	strcpy(s.buf, "hello");
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf, .length = 6, .lkey = s.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(s.qp, &wr, &bad))
		lab_die("ibv_post_send (is the QP in RTS?)");
	lab_wait(&s);
	lab_signal(sock);
	lab_teardown(&s);
	return 0;
}

static int responder(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	lab_setup(&s, "responder", "softverbs1", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 2000, &peer);
	connect_qp(&s, 2000, &peer);
	print_state(&s);
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf, .length = 64, .lkey = s.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(s.qp, &wr, &bad))
		lab_die("ibv_post_recv (is the QP past RESET?)");
	lab_signal(sock);
	lab_wait(&s);
	printf("mem responder %s\n", s.buf);
	lab_await(sock);
	lab_teardown(&s);
	return 0;
}

int main(void)
{
	return lab_two(requester, responder);
}
