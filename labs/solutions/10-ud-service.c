/*
 * Lab 10: a UD service (labs/10-ud-service/README.md).
 * One server QP of type UD answers two clients: no connection, each request a datagram that
 * names its sender (src_qp, and the GRH's source GID), each reply addressed by an address
 * handle made from that request.
 *   cc -o lab10 lab.c -libverbs && softverbs labs check 10 ./lab10
 */
#include "../common/labkit.h"

#define CLIENTS 2
#define QKEY 0x11111111
#define GRH 40 /* a UD receive starts with the 40 bytes of the GRH (or room for it) */
#define SLOT 128

/* Open devname and make a PD, a registered buffer, a CQ and a UD QP brought to RTS. */
static void ud_setup(struct side *s, const char *name, const char *devname)
{
	s->name = name;
	s->ctx = lab_open(devname);
	s->pd = ibv_alloc_pd(s->ctx);
	s->buf = aligned_alloc(4096, LAB_BUF);
	memset(s->buf, 0, LAB_BUF);
	s->mr = ibv_reg_mr(s->pd, s->buf, LAB_BUF, IBV_ACCESS_LOCAL_WRITE);
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	if (!s->pd || !s->mr || !s->cq)
		lab_die("pd/mr/cq");
	struct ibv_qp_init_attr init = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (!(s->qp = ibv_create_qp(s->pd, &init)))
		lab_die("ibv_create_qp");
	/* TODO(1): bring the UD QP to RTS: INIT with the P_Key index, the port and the Q_Key
	 * (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), RTR with the state
	 * alone, RTS with the first PSN (IBV_QP_STATE | IBV_QP_SQ_PSN). No peer, no path. */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qkey = QKEY };
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		lab_die("modify to INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE))
		lab_die("modify to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		lab_die("modify to RTS");
}

static void post_recv(struct side *s, int k)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf + k * SLOT, .length = SLOT,
			       .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = k, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(s->qp, &wr, &bad))
		lab_die("ibv_post_recv");
}

/* SEND `len` bytes at s->buf + off as a datagram to QP `qpn` through `ah`. */
static void send_to(struct side *s, struct ibv_ah *ah, uint32_t qpn, int off, int len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 99, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = QKEY;
	if (ibv_post_send(s->qp, &wr, &bad))
		lab_die("ibv_post_send");
}

static int client(int i, int sock)
{
	char name[16];
	struct side s = { 0 };
	struct peer_info peer;
	snprintf(name, sizeof(name), "client%d", i);
	ud_setup(&s, strdup(name), "softverbs1");
	post_recv(&s, 0);
	lab_exchange(sock, &s, 0, &peer);
	/* The server's address: its GID, through an address handle. */
	struct ibv_ah_attr ah_attr = { .is_global = 1, .port_num = 1,
				       .grh = { .dgid = peer.gid, .sgid_index = 0, .hop_limit = 1 } };
	struct ibv_ah *ah = ibv_create_ah(s.pd, &ah_attr);
	if (!ah)
		lab_die("ibv_create_ah");
	lab_await(sock); /* go */
	int len = snprintf(s.buf + 2048, 64, "time please, from client%d", i) + 1;
	send_to(&s, ah, peer.qpn, 2048, len);
	for (int got = 0; got < 2;) {
		struct ibv_wc wc = lab_poll(&s, 0);
		if (wc.opcode == IBV_WC_RECV) {
			printf("mem %s reply: %s\n", s.name, s.buf + GRH);
			got++;
		} else {
			lab_print_wc(&s, &wc);
			got++;
		}
	}
	lab_signal(sock); /* done */
	ibv_destroy_ah(ah);
	lab_teardown(&s);
	return 0;
}

/* The next request: a receive completion. The server's replies complete on the same CQ, and
 * a request can arrive before the reply to the one before it has completed, so a SEND's
 * completion met here is counted in *sent rather than taken for a request. */
static struct ibv_wc next_request(struct side *s, int *sent)
{
	for (;;) {
		struct ibv_wc wc = lab_poll(s, 0);
		if (wc.opcode & IBV_WC_RECV)
			return wc;
		(*sent)++;
	}
}

int main(void)
{
	int socks[CLIENTS];
	pid_t pids[CLIENTS];
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < CLIENTS; i++) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			lab_die("socketpair");
		if ((pids[i] = fork()) < 0)
			lab_die("fork");
		if (pids[i] == 0) {
			close(sv[0]);
			exit(client(i + 1, sv[1]));
		}
		close(sv[1]);
		socks[i] = sv[0];
	}
	struct side server = { 0 };
	ud_setup(&server, "server", "softverbs0");
	uint32_t client_qpn[CLIENTS];
	for (int k = 0; k < CLIENTS; k++)
		post_recv(&server, k);
	for (int i = 0; i < CLIENTS; i++) {
		struct peer_info peer;
		lab_exchange(socks[i], &server, 0, &peer);
		client_qpn[i] = peer.qpn;
	}
	for (int i = 0; i < CLIENTS; i++)
		lab_signal(socks[i]); /* go */
	int sent = 0;
	struct ibv_ah *ahs[CLIENTS] = { 0 };
	for (int n = 0; n < CLIENTS; n++) {
		struct ibv_wc wc = next_request(&server, &sent);
		int who = 0;
		for (int i = 0; i < CLIENTS; i++)
			if (wc.src_qp == client_qpn[i])
				who = i + 1;
		char *req = server.buf + wc.wr_id * SLOT + GRH;
		printf("mem server request from client%d: %s\n", who, req);
		/* TODO(2): answer the sender: an address handle made from the request's completion
		 * and GRH (ibv_create_ah_from_wc), and a SEND to wc.src_qp with the Q_Key. */
		struct ibv_ah *ah = ibv_create_ah_from_wc(server.pd, &wc,
				(struct ibv_grh *)(server.buf + wc.wr_id * SLOT), 1);
		if (!ah)
			lab_die("ibv_create_ah_from_wc");
		ahs[n] = ah;
		int off = 1024 + n * 64;
		int len = snprintf(server.buf + off, 64, "it is time, client%d", who) + 1;
		send_to(&server, ah, wc.src_qp, off, len);
	}
	/* The replies' completions not met yet; then their address handles can go. */
	while (sent < CLIENTS && ahs[CLIENTS - 1]) {
		lab_poll(&server, 0);
		sent++;
	}
	for (int n = 0; n < CLIENTS; n++)
		if (ahs[n])
			ibv_destroy_ah(ahs[n]);
	int rc = 0;
	for (int i = 0; i < CLIENTS; i++) {
		int status;
		char c;
		if (read(socks[i], &c, 1) != 1)
			rc = 1;
		waitpid(pids[i], &status, 0);
		rc |= !WIFEXITED(status) || WEXITSTATUS(status);
	}
	lab_teardown(&server);
	return rc;
}
