/*
 * Lab 3: SEND and RECV (labs/3-send-recv/README.md).
 * The requester SENDs "hello" (6 bytes with its NUL); the responder receives it into a buffer
 * it posted beforehand.
 *   cc -o lab3 lab.c -libverbs && softverbs labs check 3 ./lab3
 */
#include "../common/labkit.h"

static int requester(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	lab_setup(&s, "requester", "softverbs0", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 1000, &peer);
	lab_connect(&s, 1000, &peer);
	lab_await(sock); /* the responder's receive is posted */
	strcpy(s.buf, "hello");
	/* TODO(1): post one signaled IBV_WR_SEND of the 6 bytes at s.buf (one SGE, s.mr->lkey)
	 * with ibv_post_send. */
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf, .length = 6, .lkey = s.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(s.qp, &wr, &bad))
		lab_die("ibv_post_send");
	lab_wait(&s);
	lab_signal(sock); /* done */
	lab_teardown(&s);
	return 0;
}

static int responder(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	lab_setup(&s, "responder", "softverbs1", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 2000, &peer);
	lab_connect(&s, 2000, &peer);
	/* TODO(2): a SEND consumes a receive the responder posted: post one receive of 64 bytes
	 * at s.buf with ibv_post_recv, before telling the requester to go. */
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf, .length = 64, .lkey = s.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(s.qp, &wr, &bad))
		lab_die("ibv_post_recv");
	lab_signal(sock); /* go */
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
