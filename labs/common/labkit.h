/*
 * labkit.h - what every lab after the one that teaches it shares: opening a device, making a
 * side's objects, connecting an RC QP, swapping what the peer must know, waiting for and
 * printing a completion, and running two processes. Read it: each part is a lab of its own.
 *
 * Every lab program prints its results in one form, which `softverbs labs check` reads:
 *   wc SIDE status=IBV_WC_SUCCESS opcode=IBV_WC_RECV byte_len=6 [imm=0x1234]
 *   mem SIDE TEXT
 */
#ifndef LABKIT_H
#define LABKIT_H
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LAB_BUF 4096

/* What one side tells the other: to connect (QPN, PSN, GID) and to reach its memory. */
struct peer_info {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

struct side {
	const char *name;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_comp_channel *channel; /* NULL unless the lab asks for events */
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	char *buf;
};

static inline void lab_die(const char *what)
{
	perror(what);
	exit(1);
}

/* No device to open: most often the program ran on the system's libibverbs, which has no
 * softverbs devices ("ibv_get_device_list: Function not implemented" when it has no provider
 * at all). Say how to run it on softverbs, and exit. */
static inline void lab_no_devices(const char *what)
{
	fprintf(stderr, "%s: run the lab on softverbs, `softverbs run -- ./PROGRAM` or "
			"`softverbs labs check N ./PROGRAM`: the program ran on the system's "
			"libibverbs, which has no softverbs devices\n", what);
	exit(1);
}

static inline struct ibv_context *lab_open(const char *devname)
{
	int n;
	struct ibv_context *ctx = NULL;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n == 0)
		lab_no_devices(list ? "no RDMA device" : "ibv_get_device_list failed");
	for (int i = 0; i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), devname))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx) {
		fprintf(stderr, "no device %s\n", devname);
		exit(1);
	}
	return ctx;
}

/* Open devname and make a PD, a LAB_BUF buffer registered with `access`, a CQ (on a completion
 * channel when `events`) and an RC QP. */
static inline void lab_setup(struct side *s, const char *name, const char *devname, int access,
		      int events)
{
	s->name = name;
	s->ctx = lab_open(devname);
	s->pd = ibv_alloc_pd(s->ctx);
	s->buf = aligned_alloc(4096, LAB_BUF);
	memset(s->buf, 0, LAB_BUF);
	s->mr = ibv_reg_mr(s->pd, s->buf, LAB_BUF, access);
	if (events && !(s->channel = ibv_create_comp_channel(s->ctx)))
		lab_die("ibv_create_comp_channel");
	s->cq = ibv_create_cq(s->ctx, 16, NULL, s->channel, 0);
	if (!s->pd || !s->mr || !s->cq)
		lab_die("pd/mr/cq");
	struct ibv_qp_init_attr init = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (!(s->qp = ibv_create_qp(s->pd, &init)))
		lab_die("ibv_create_qp");
}

/* RESET -> INIT -> RTR -> RTS (lab 2 is this function). */
static inline void lab_connect(struct side *s, uint32_t my_psn, const struct peer_info *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
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
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		lab_die("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = my_psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 3; /* not 7 (for ever): a missing receive shows as IBV_WC_RNR_RETRY_EXC_ERR */
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		lab_die("modify to RTS");
}

/* Swap peer_info over the socket: write ours, read theirs. */
static inline void lab_exchange(int sock, struct side *s, uint32_t psn, struct peer_info *peer)
{
	struct peer_info me = { .qpn = s->qp->qp_num, .psn = psn, .rkey = s->mr->rkey,
				.addr = (uintptr_t)s->buf };
	if (ibv_query_gid(s->ctx, 1, 0, &me.gid))
		lab_die("ibv_query_gid");
	if (write(sock, &me, sizeof(me)) != sizeof(me) ||
	    read(sock, peer, sizeof(*peer)) != sizeof(*peer))
		lab_die("exchange");
}

/* One byte over the socket: "go on" / "I'm done". */
static inline void lab_signal(int sock)
{
	if (write(sock, "s", 1) != 1)
		lab_die("signal");
}
static inline void lab_await(int sock)
{
	char c;
	if (read(sock, &c, 1) != 1) {
		fprintf(stderr, "the peer process closed the socket (it exited)\n");
		exit(1);
	}
}

static inline const char *lab_wc_opcode(enum ibv_wc_opcode op)
{
	switch (op) {
	case IBV_WC_SEND: return "IBV_WC_SEND";
	case IBV_WC_RDMA_WRITE: return "IBV_WC_RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "IBV_WC_RDMA_READ";
	case IBV_WC_COMP_SWAP: return "IBV_WC_COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "IBV_WC_FETCH_ADD";
	case IBV_WC_RECV: return "IBV_WC_RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "IBV_WC_RECV_RDMA_WITH_IMM";
	default: return "IBV_WC_(other)";
	}
}

static inline const char *lab_wc_status(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS";
	case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR";
	case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR";
	case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR";
	case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR";
	case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR";
	case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR";
	case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR";
	case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR";
	default: return "IBV_WC_(other error)";
	}
}

/* Print a completion in the labs' form. */
static inline void lab_print_wc(const struct side *s, const struct ibv_wc *wc)
{
	printf("wc %s status=%s opcode=%s byte_len=%u", s->name, lab_wc_status(wc->status),
	       lab_wc_opcode(wc->opcode), wc->byte_len);
	if (wc->wc_flags & IBV_WC_WITH_IMM)
		printf(" imm=0x%x", ntohl(wc->imm_data));
	printf("\n");
}

/* Poll for one completion (at most 5 s: ibv_poll_cq never blocks, so give up rather than spin
 * for ever), print it when `print` or when it failed, and exit 1 unless it succeeded. */
static inline struct ibv_wc lab_poll(struct side *s, int print)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	int n;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 5) {
			fprintf(stderr, "%s: no completion in 5 s\n", s->name);
			exit(1);
		}
	}
	if (n < 0)
		lab_die("ibv_poll_cq");
	if (print || wc.status != IBV_WC_SUCCESS)
		lab_print_wc(s, &wc);
	if (wc.status != IBV_WC_SUCCESS)
		exit(1);
	return wc;
}

/* lab_poll, printing the completion. */
static inline struct ibv_wc lab_wait(struct side *s)
{
	return lab_poll(s, 1);
}

/* Run requester(sock) in this process and responder(sock) in a forked child, connected by a
 * socketpair; the exit status is 1 unless both succeed. */
static inline int lab_two(int (*requester)(int), int (*responder)(int))
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		lab_die("socketpair");
	setvbuf(stdout, NULL, _IOLBF, 0);
	pid_t pid = fork();
	if (pid < 0)
		lab_die("fork");
	if (pid == 0) { /* verbs objects are opened after the fork, each process its own */
		close(sv[0]);
		exit(responder(sv[1]));
	}
	close(sv[1]);
	int rc = requester(sv[0]);
	close(sv[0]);
	int status;
	waitpid(pid, &status, 0);
	return rc || !WIFEXITED(status) || WEXITSTATUS(status);
}

static inline void lab_teardown(struct side *s)
{
	ibv_destroy_qp(s->qp);
	ibv_destroy_cq(s->cq);
	if (s->channel)
		ibv_destroy_comp_channel(s->channel);
	ibv_dereg_mr(s->mr);
	ibv_dealloc_pd(s->pd);
	ibv_close_device(s->ctx);
}
#endif
