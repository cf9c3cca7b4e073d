/*
 * Lab 8: fix a broken program (labs/8-fix-it/README.md).
 * The fixed program: each fix is marked FIXED.
 *   cc -o lab8 lab.c -libverbs && softverbs labs check 8 ./lab8
 */
#include "../common/labkit.h"

static void connect_qp(struct side *s, uint32_t my_psn, const struct peer_info *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		lab_die("modify to INIT");
	memset(&a, 0, sizeof(a));
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
	/* FIXED: RTR needs the peer's QP number, and the mask must say it is set. */
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		lab_die("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = my_psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 3;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		lab_die("modify to RTS");
}

static int requester(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	lab_setup(&s, "requester", "softverbs0", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 1000, &peer);
	connect_qp(&s, 1000, &peer);
	lab_await(sock);
	strcpy(s.buf, "hello");
	strcpy(s.buf + 64, "written by WRITE");
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf, .length = 6, .lkey = s.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(s.qp, &wr, &bad))
		lab_die("ibv_post_send");
	lab_wait(&s);
	sge.addr = (uintptr_t)s.buf + 64;
	sge.length = 17;
	wr.wr_id = 2;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = peer.addr + 1024;
	wr.wr.rdma.rkey = peer.rkey;
	if (ibv_post_send(s.qp, &wr, &bad))
		lab_die("ibv_post_send");
	lab_wait(&s);
	lab_signal(sock);
	lab_teardown(&s);
	return 0;
}

static int responder(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	/* FIXED: a peer's RDMA WRITE needs IBV_ACCESS_REMOTE_WRITE on the memory region. */
	lab_setup(&s, "responder", "softverbs1", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0);
	lab_exchange(sock, &s, 2000, &peer);
	connect_qp(&s, 2000, &peer);
	/* FIXED: a SEND needs a receive posted on the responder before it arrives. */
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf, .length = 64, .lkey = s.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(s.qp, &wr, &bad))
		lab_die("ibv_post_recv");
	lab_signal(sock);
	lab_wait(&s);
	printf("mem responder %s\n", s.buf);
	lab_await(sock);
	printf("mem responder %s\n", s.buf + 1024);
	lab_teardown(&s);
	return 0;
}

int main(void)
{
	return lab_two(requester, responder);
}
