/*
 * Lab 9: one shared receive queue for several clients (labs/9-srq/README.md).
 * The server makes one SRQ, posts its receives there, and creates one RC QP per client with
 * that SRQ: each client's SEND takes whichever receive is next, whatever QP it came on.
 *   cc -o lab9 lab.c -libverbs && softverbs labs check 9 ./lab9
 */
#include "../common/labkit.h"

#define CLIENTS 2
#define RECVS 4
#define SLOT 64

static int client(int i, int sock)
{
	char name[16];
	struct side s = { 0 };
	struct peer_info peer;
	snprintf(name, sizeof(name), "client%d", i);
	lab_setup(&s, strdup(name), "softverbs1", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 1000, &peer);
	lab_connect(&s, 1000, &peer);
	lab_signal(sock); /* connected */
	lab_await(sock);  /* go */
	int len = snprintf(s.buf, SLOT, "hello from client%d", i) + 1;
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf, .length = len, .lkey = s.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(s.qp, &wr, &bad))
		lab_die("ibv_post_send");
	lab_wait(&s);
	lab_signal(sock); /* done */
	lab_teardown(&s);
	return 0;
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
	lab_setup(&server, "server", "softverbs0", IBV_ACCESS_LOCAL_WRITE, 0);
	/* TODO(1): make one shared receive queue on the server's PD (ibv_create_srq, room for
	 * RECVS receives of one SGE) and post RECVS receives to it (ibv_post_srq_recv), receive
	 * k into the SLOT bytes at server.buf + k * SLOT, with wr_id k. */
	struct ibv_srq *srq = NULL;
	struct ibv_qp *qps[CLIENTS];
	ibv_destroy_qp(server.qp); /* lab_setup's QP has a receive queue of its own */
	for (int i = 0; i < CLIENTS; i++) {
		struct ibv_qp_init_attr init = {
			.send_cq = server.cq, .recv_cq = server.cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 8, .max_send_sge = 1 },
		};
		/* TODO(2): give the QP the shared receive queue, so its SENDs take its receives. */
		struct side one = server;
		if (!(one.qp = qps[i] = ibv_create_qp(server.pd, &init)))
			lab_die("ibv_create_qp");
		struct peer_info peer;
		lab_exchange(socks[i], &one, 2000, &peer);
		lab_connect(&one, 2000, &peer);
	}
	for (int i = 0; i < CLIENTS; i++)
		lab_await(socks[i]); /* connected */
	for (int i = 0; i < CLIENTS; i++)
		lab_signal(socks[i]); /* go */
	int from_qps = 0;
	for (int n = 0; n < CLIENTS; n++) {
		struct ibv_wc wc = lab_poll(&server, 0);
		for (int i = 0; i < CLIENTS; i++)
			if (wc.qp_num == qps[i]->qp_num) {
				printf("mem server from client%d: %s\n", i + 1, server.buf + wc.wr_id * SLOT);
				from_qps |= 1 << i;
			}
	}
	printf("srq server: %d receives taken, on %d QPs\n", CLIENTS,
	       __builtin_popcount(from_qps));
	int rc = 0;
	for (int i = 0; i < CLIENTS; i++) {
		int status;
		char c;
		if (read(socks[i], &c, 1) != 1)
			rc = 1;
		waitpid(pids[i], &status, 0);
		rc |= !WIFEXITED(status) || WEXITSTATUS(status);
		ibv_destroy_qp(qps[i]);
	}
	server.qp = NULL;
	ibv_destroy_srq(srq);
	ibv_destroy_cq(server.cq);
	ibv_dereg_mr(server.mr);
	ibv_dealloc_pd(server.pd);
	ibv_close_device(server.ctx);
	return rc;
}
