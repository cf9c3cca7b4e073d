/*
 * Lab 6: an atomic counter shared by four processes (labs/6-atomic-counter/README.md).
 * The server process holds a 64-bit counter at offset 0 of its buffer; four client processes
 * each add 1 to it 100 times with RDMA FETCH_AND_ADD. No update may be lost: 400 at the end.
 *   cc -o lab6 lab.c -libverbs && softverbs labs check 6 ./lab6
 */
#include <inttypes.h>
#include "../common/labkit.h"

#define CLIENTS 4
#define ADDS 100

static int client(int i, int sock)
{
	char name[16];
	struct side s = { 0 };
	struct peer_info peer;
	snprintf(name, sizeof(name), "client%d", i);
	lab_setup(&s, strdup(name), "softverbs1", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 1000, &peer);
	lab_connect(&s, 1000, &peer);
	lab_await(sock); /* every client is connected */
	for (int k = 0; k < ADDS; k++) {
		/* TODO(1): post one signaled IBV_WR_ATOMIC_FETCH_AND_ADD that adds 1 to the 8-byte
		 * counter at peer.addr (wr.wr.atomic: remote_addr, rkey, compare_add); the old value
		 * comes back into the 8 bytes at s.buf. */
		lab_poll(&s, k == ADDS - 1); /* print the last completion only */
	}
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
	/* The server: one buffer and MR, one CQ, one QP per client. */
	int access = IBV_ACCESS_LOCAL_WRITE;
	/* TODO(2): let the clients' atomics in: add the access flag a FETCH_AND_ADD needs. */
	struct side server = { 0 };
	lab_setup(&server, "server", "softverbs0", access, 0);
	struct ibv_qp *qps[CLIENTS];
	for (int i = 0; i < CLIENTS; i++) {
		struct side one = server; /* the same PD, MR and CQ; a QP of its own */
		if (i > 0) {
			struct ibv_qp_init_attr init = {
				.send_cq = server.cq, .recv_cq = server.cq, .qp_type = IBV_QPT_RC,
				.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
					 .max_recv_sge = 1 },
			};
			if (!(one.qp = ibv_create_qp(server.pd, &init)))
				lab_die("ibv_create_qp");
		}
		struct peer_info peer;
		lab_exchange(socks[i], &one, 2000, &peer);
		lab_connect(&one, 2000, &peer);
		qps[i] = one.qp;
	}
	for (int i = 0; i < CLIENTS; i++)
		lab_signal(socks[i]); /* go */
	int rc = 0;
	for (int i = 0; i < CLIENTS; i++) {
		char c;
		if (read(socks[i], &c, 1) != 1)
			rc = 1; /* that client exited early */
	}
	uint64_t counter;
	memcpy(&counter, server.buf, 8);
	printf("mem server counter=%" PRIu64 "\n", counter);
	for (int i = 0; i < CLIENTS; i++) {
		int status;
		waitpid(pids[i], &status, 0);
		rc |= !WIFEXITED(status) || WEXITSTATUS(status);
		if (i > 0)
			ibv_destroy_qp(qps[i]);
	}
	lab_teardown(&server);
	return rc;
}
