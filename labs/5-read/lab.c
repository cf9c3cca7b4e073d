/*
 * Lab 5: RDMA READ (labs/5-read/README.md).
 * The responder puts "read me" (8 bytes with its NUL) at offset 2048 of its buffer; the
 * requester reads them into its own buffer at offset 128. The responder's program does nothing
 * meanwhile: its NIC answers.
 *   cc -o lab5 lab.c -libverbs && softverbs labs check 5 ./lab5
 */
#include "../common/labkit.h"

static int requester(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	lab_setup(&s, "requester", "softverbs0", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 1000, &peer);
	lab_connect(&s, 1000, &peer);
	lab_await(sock); /* the responder's bytes are in place */
	/* TODO(1): post one signaled IBV_WR_RDMA_READ of 8 bytes from the responder's buffer at
	 * offset 2048 (peer.addr, peer.rkey) into s.buf + 128. */
	lab_wait(&s);
	printf("mem requester %s\n", s.buf + 128);
	lab_signal(sock); /* done */
	lab_teardown(&s);
	return 0;
}

static int responder(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	lab_setup(&s, "responder", "softverbs1", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, 0);
	strcpy(s.buf + 2048, "read me");
	lab_exchange(sock, &s, 2000, &peer);
	lab_connect(&s, 2000, &peer);
	lab_signal(sock); /* go */
	lab_await(sock);
	lab_teardown(&s);
	return 0;
}

int main(void)
{
	return lab_two(requester, responder);
}
