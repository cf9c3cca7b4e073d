/*
 * Lab 4: RDMA WRITE with immediate (labs/4-write-imm/README.md).
 * The requester writes "written by WRITE" (17 bytes) into the responder's buffer at offset
 * 1024, with immediate data 0x1234; the write consumes a receive on the responder, whose
 * completion carries the immediate.
 *   cc -o lab4 lab.c -libverbs && softverbs labs check 4 ./lab4
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
	strcpy(s.buf + 64, "written by WRITE");
	/* TODO(1): post one signaled IBV_WR_RDMA_WRITE_WITH_IMM of the 17 bytes at s.buf + 64 to
	 * the responder's buffer at offset 1024 (wr.wr.rdma.remote_addr, .rkey from peer), with
	 * imm_data 0x1234 in network byte order. */
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf + 64, .length = 17, .lkey = s.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0x1234) }, *bad;
	wr.wr.rdma.remote_addr = peer.addr + 1024;
	wr.wr.rdma.rkey = peer.rkey;
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
	lab_setup(&s, "responder", "softverbs1", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0);
	lab_exchange(sock, &s, 2000, &peer);
	lab_connect(&s, 2000, &peer);
	/* TODO(2): the immediate needs a receive: post one with ibv_post_recv (no SGE is needed:
	 * the bytes go where the WRITE says, only the completion uses the receive). */
	struct ibv_recv_wr wr = { .wr_id = 2, .sg_list = NULL, .num_sge = 0 }, *bad;
	if (ibv_post_recv(s.qp, &wr, &bad))
		lab_die("ibv_post_recv");
	lab_signal(sock); /* go */
	lab_wait(&s);
	printf("mem responder %s\n", s.buf + 1024);
	lab_await(sock);
	lab_teardown(&s);
	return 0;
}

int main(void)
{
	return lab_two(requester, responder);
}
