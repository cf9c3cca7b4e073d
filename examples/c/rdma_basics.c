/*
 * rdma_basics.c - the four kinds of RDMA operation, in plain C against libibverbs.
 *
 * One program, two processes: it forks, and the parent (the requester, on device softverbs0)
 * and the child (the responder, on softverbs1) each open their own device, connect one RC
 * queue pair to the other's, and then the requester does
 *
 *   1. a SEND       - the responder posted a receive buffer; the message lands there;
 *   2. an RDMA WRITE - straight into the responder's registered memory, no receive needed;
 *   3. an RDMA READ  - fetches bytes from the responder's memory;
 *   4. an atomic FETCH_AND_ADD on a 64-bit counter in the responder's memory.
 *
 * The two processes swap what a peer must know (QP number, packet sequence number, GID,
 * buffer address and rkey) over a socketpair, as real programs do over TCP.
 *
 * Build and run on softverbs (docs/c.md):
 *   cc -o rdma_basics examples/c/rdma_basics.c -libverbs
 *   softverbs run -- ./rdma_basics
 * It runs unchanged on a real RDMA NIC or rxe: pass the two device names as arguments.
 */
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUF_SIZE 4096
/* Where in the responder's buffer each operation works. */
#define SEND_OFF 0
#define WRITE_OFF 1024
#define READ_OFF 2048
#define ATOMIC_OFF 3072

/* What one side tells the other to connect and to reach its memory. */
struct peer_info {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	char *buf;
};

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* Open the named device and make everything one side needs: a protection domain, a registered
 * buffer any peer may write, read and update atomically, a completion queue and an RC QP. */
static void setup(struct side *s, const char *devname)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list");
	for (int i = 0; i < n && !s->ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), devname))
			s->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!s->ctx) {
		fprintf(stderr, "no device %s\n", devname);
		exit(1);
	}
	s->pd = ibv_alloc_pd(s->ctx);
	s->buf = aligned_alloc(4096, BUF_SIZE);
	memset(s->buf, 0, BUF_SIZE);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF_SIZE,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	if (!s->pd || !s->mr || !s->cq)
		die("pd/mr/cq");
	struct ibv_qp_init_attr init = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	s->qp = ibv_create_qp(s->pd, &init);
	if (!s->qp)
		die("ibv_create_qp");
}

/* RESET -> INIT -> RTR -> RTS, the walk every connected QP takes. RTR needs the peer's QPN,
 * its first PSN and its address (a GID: soft ports are RoCE v2); RTS needs our own PSN. */
static void connect_qp(struct side *s, uint32_t my_psn, const struct peer_info *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		die("modify to INIT");
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
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = my_psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify to RTS");
}

/* Swap peer_info over the socket: write ours, read theirs. */
static void exchange(int sock, struct side *s, uint32_t psn, struct peer_info *peer)
{
	struct peer_info me = { .qpn = s->qp->qp_num, .psn = psn, .rkey = s->mr->rkey,
				.addr = (uintptr_t)s->buf };
	if (ibv_query_gid(s->ctx, 1, 0, &me.gid))
		die("ibv_query_gid");
	if (write(sock, &me, sizeof(me)) != sizeof(me) || read(sock, peer, sizeof(*peer)) != sizeof(*peer))
		die("exchange");
}

/* Wait for one completion and insist it succeeded. ibv_poll_cq never blocks: spin. */
static struct ibv_wc wait_one(struct side *s, const char *what)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0)
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "%s: %s\n", what, n < 0 ? "poll failed" : ibv_wc_status_str(wc.status));
		exit(1);
	}
	return wc;
}

/* Post one work request with one SGE over our buffer at local_off. */
static void post(struct side *s, enum ibv_wr_opcode op, size_t local_off, uint32_t len,
		 const struct peer_info *peer, size_t remote_off)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf + local_off, .length = len,
			       .lkey = s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = op, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = peer->addr + remote_off;
		wr.wr.atomic.rkey = peer->rkey;
		wr.wr.atomic.compare_add = 1; /* add 1; the old value comes back in sge */
	} else if (op != IBV_WR_SEND) {
		wr.wr.rdma.remote_addr = peer->addr + remote_off;
		wr.wr.rdma.rkey = peer->rkey;
	}
	if (ibv_post_send(s->qp, &wr, &bad))
		die("ibv_post_send");
}

static int requester(int sock, const char *dev)
{
	struct side s = { 0 };
	struct peer_info peer;
	setup(&s, dev);
	exchange(sock, &s, 1000, &peer);
	connect_qp(&s, 1000, &peer);
	char go;
	if (read(sock, &go, 1) != 1) /* the responder's receive is posted */
		die("read");

	strcpy(s.buf, "hello");
	post(&s, IBV_WR_SEND, 0, 6, &peer, 0);
	wait_one(&s, "SEND");
	printf("requester: SEND completed\n");

	strcpy(s.buf + 64, "written by WRITE");
	post(&s, IBV_WR_RDMA_WRITE, 64, 17, &peer, WRITE_OFF);
	wait_one(&s, "RDMA WRITE");
	printf("requester: RDMA WRITE completed\n");

	post(&s, IBV_WR_RDMA_READ, 128, 8, &peer, READ_OFF);
	wait_one(&s, "RDMA READ");
	printf("requester: RDMA READ got: %s\n", s.buf + 128);

	post(&s, IBV_WR_ATOMIC_FETCH_AND_ADD, 256, 8, &peer, ATOMIC_OFF);
	wait_one(&s, "FETCH_AND_ADD");
	uint64_t old;
	memcpy(&old, s.buf + 256, 8);
	printf("requester: FETCH_AND_ADD returned %" PRIu64 "\n", old);

	if (write(sock, "d", 1) != 1) /* done: the responder may look at its memory */
		die("write");
	ibv_destroy_qp(s.qp);
	ibv_destroy_cq(s.cq);
	ibv_dereg_mr(s.mr);
	ibv_dealloc_pd(s.pd);
	ibv_close_device(s.ctx);
	return 0;
}

static int responder(int sock, const char *dev)
{
	struct side s = { 0 };
	struct peer_info peer;
	setup(&s, dev);
	strcpy(s.buf + READ_OFF, "read me");
	uint64_t counter = 41;
	memcpy(s.buf + ATOMIC_OFF, &counter, 8);

	exchange(sock, &s, 2000, &peer);
	connect_qp(&s, 2000, &peer);
	/* A SEND consumes a posted receive: post it (a QP takes receives from INIT on) before
	 * telling the requester to go. */
	struct ibv_sge sge = { .addr = (uintptr_t)s.buf + SEND_OFF, .length = 64,
			       .lkey = s.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(s.qp, &rwr, &bad))
		die("ibv_post_recv");
	if (write(sock, "g", 1) != 1)
		die("write");

	struct ibv_wc wc = wait_one(&s, "receive");
	printf("responder: received SEND: %s (%u bytes)\n", s.buf + SEND_OFF, wc.byte_len);
	char done;
	if (read(sock, &done, 1) != 1)
		die("read");
	/* WRITE, READ and the atomic completed without a single verb call on this side. */
	memcpy(&counter, s.buf + ATOMIC_OFF, 8);
	printf("responder: WRITE landed: %s\n", s.buf + WRITE_OFF);
	printf("responder: counter is now %" PRIu64 "\n", counter);
	ibv_destroy_qp(s.qp);
	ibv_destroy_cq(s.cq);
	ibv_dereg_mr(s.mr);
	ibv_dealloc_pd(s.pd);
	ibv_close_device(s.ctx);
	return 0;
}

int main(int argc, char **argv)
{
	const char *req_dev = argc > 1 ? argv[1] : "softverbs0";
	const char *resp_dev = argc > 2 ? argv[2] : "softverbs1";
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair");
	setvbuf(stdout, NULL, _IOLBF, 0);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) { /* verbs objects are opened after the fork, each process its own */
		close(sv[0]); /* so that either side sees the other's exit as end of file */
		return responder(sv[1], resp_dev);
	}
	close(sv[1]);
	int rc = requester(sv[0], req_dev);
	int status;
	waitpid(pid, &status, 0);
	return rc || !WIFEXITED(status) || WEXITSTATUS(status);
}
