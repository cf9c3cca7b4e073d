/*
 * Lab 7: events instead of polling (labs/7-events/README.md).
 * The responder waits for its receive's completion by sleeping on a completion channel (the
 * CQ was made with one) instead of spinning on ibv_poll_cq.
 *   cc -o lab7 lab.c -libverbs && softverbs labs check 7 ./lab7
 */
#include "../common/labkit.h"

static int requester(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	lab_setup(&s, "requester", "softverbs0", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 1000, &peer);
	lab_connect(&s, 1000, &peer);
	lab_await(sock); /* the responder's receive is posted and its CQ armed */
	usleep(100 * 1000); /* the responder is asleep in ibv_get_cq_event by now */
	strcpy(s.buf, "hello");
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf, .length = 6, .lkey = s.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
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
	lab_setup(&s, "responder", "softverbs1", IBV_ACCESS_LOCAL_WRITE, 1); /* with a channel */
	lab_exchange(sock, &s, 2000, &peer);
	lab_connect(&s, 2000, &peer);
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf, .length = 64, .lkey = s.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *rbad;
	if (ibv_post_recv(s.qp, &rwr, &rbad))
		lab_die("ibv_post_recv");
	/* TODO(1): arm the CQ: ask for an event at its next completion (ibv_req_notify_cq). */
	lab_signal(sock); /* go */
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	/* TODO(2): sleep until the event comes (ibv_get_cq_event on s.channel), print
	 * "event responder cq", and acknowledge it (ibv_ack_cq_events). */
	(void)ev_cq;
	(void)ev_ctx;
	/* The event says the CQ has a completion: take it (without waiting). */
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
