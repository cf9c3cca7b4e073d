/*
 * transport.c - the transport's behaviour as a C program sees it, for the matrix that runs
 * every behaviour with direct reach on and off (tests/transport.rs): the same lines must come
 * out both ways, as on rxe. Two devices of one process (softverbs0 and softverbs1), a fresh
 * RC pair for each case, buffers from posix_memalign registered with ibv_reg_mr as C
 * programs register them:
 *   order     a WRITE then a SEND on one QP: when the SEND's receive completes, the WRITE's
 *             bytes are there (RC executes in order), and every field of both completions;
 *   own-rkey  a WRITE with the requester's own MR key instead of the peer's: REM_ACCESS_ERR;
 *   stale     a WRITE with the key of an MR the peer deregistered: REM_ACCESS_ERR;
 *   atomic    a FETCH_AND_ADD on an MR without REMOTE_ATOMIC: REM_ACCESS_ERR, word unchanged;
 *   read      a READ, and a compare-and-swap, with the bytes and the original word checked;
 *   psn       a requester 0x100 PSNs ahead of the responder's expected PSN: RETRY_EXC_ERR;
 *   mtu       a 1024-byte WRITE from a 1024-byte path MTU to a responder at 256: REM_INV_REQ_ERR;
 *   dead      a peer process killed with SIGKILL: the next WRITE ends in RETRY_EXC_ERR;
 *   err       the responder's QP moved to ERR: the next WRITE ends in RETRY_EXC_ERR and no
 *             byte of it lands (rxe drops what reaches a QP in ERR);
 *   list      four 512 KiB WRITEs chained in one ibv_post_send: four completions in order and
 *             every byte (direct reach copies at most 1 MiB of them in the call; the rest go
 *             as packets, which a program cannot tell apart).
 *   atomic-write  ibv_wr_atomic_write (a QP from ibv_create_qp_ex): the 8 bytes land and
 *             nothing around them, IBV_WC_ATOMIC_WRITE; then one at an address that is not
 *             8-byte aligned: REM_INV_REQ_ERR, the word unchanged (rxe's misaligned atomic);
 *   flush     a WRITE, then ibv_wr_flush of its range for global visibility: IBV_WC_FLUSH
 *             once the bytes are there; the MR flag IBV_ACCESS_FLUSH_PERSISTENT refused
 *             (EINVAL, as rxe refuses it for memory that is not persistent memory), a QP of
 *             type UD with IBV_QP_EX_WITH_FLUSH refused (EOPNOTSUPP); a persistent FLUSH
 *             fails REM_ACCESS_ERR. Debian 12's <infiniband/verbs.h> (rdma-core 44) has
 *             ibv_wr_atomic_write but not FLUSH: its values are spelled out below, and
 *             wr_flush is reached where rdma-core 45 put it, right after wr_atomic_write.
 * Only the fields `man ibv_poll_cq` defines for a failed completion (wr_id, status, qp_num)
 * are printed for errors. Every wait is bounded.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define LEN 8192
#define BIG (4 << 19)
#define ALL_REMOTE (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* The remote operations every QP takes (the FLUSH cases add global-visibility FLUSHes). */
static int qp_access = ALL_REMOTE;

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

/* What one side tells the other to connect (exchanged by pipe in the `dead` case). */
struct info {
	uint32_t qpn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static void die(const char *what)
{
	printf("failed: %s (errno %d)\n", what, errno);
	exit(9);
}

static void open_side_len(struct side *s, int index, int mr_access, size_t len)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n <= index)
		die("ibv_get_device_list: not enough devices");
	s->ctx = ibv_open_device(list[index]);
	ibv_free_device_list(list);
	if (!s->ctx)
		die("ibv_open_device");
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	if (!s->pd || !s->cq || posix_memalign((void **)&s->buf, 4096, len))
		die("pd, cq or buffer");
	memset(s->buf, 0, len);
	s->mr = ibv_reg_mr(s->pd, s->buf, len, IBV_ACCESS_LOCAL_WRITE | mr_access);
	struct ibv_qp_init_attr qi = { .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 } };
	s->qp = ibv_create_qp(s->pd, &qi);
	if (!s->mr || !s->qp || ibv_query_gid(s->ctx, 1, 1, &s->gid))
		die("mr, qp or gid");
}

static void open_side(struct side *s, int index, int mr_access)
{
	open_side_len(s, index, mr_access, LEN);
}

static void close_side(struct side *s)
{
	ibv_destroy_qp(s->qp);
	if (s->mr)
		ibv_dereg_mr(s->mr);
	ibv_destroy_cq(s->cq);
	ibv_dealloc_pd(s->pd);
	ibv_close_device(s->ctx);
	free(s->buf);
}

/* INIT, RTR towards `to` (expecting `rq_psn`, at `mtu`), RTS (sending from `sq_psn`); an ACK
 * timeout of 4.096 us << 10 (4 ms) and 3 retries, so a lost cause fails in tens of ms. */
static void connect_to(struct side *s, const struct info *to, uint32_t rq_psn, uint32_t sq_psn,
		       enum ibv_mtu mtu)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = qp_access };
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS))
		die("modify to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = mtu; a.dest_qp_num = to->qpn; a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12; a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = to->gid; a.ah_attr.grh.sgid_index = 1; a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER))
		die("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.timeout = 10; a.retry_cnt = 3; a.rnr_retry = 3;
	a.max_rd_atomic = 1; a.sq_psn = sq_psn;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify to RTS");
}

static struct info info_of(const struct side *s)
{
	return (struct info){ .qpn = s->qp->qp_num, .rkey = s->mr ? s->mr->rkey : 0,
			      .addr = (uintptr_t)s->buf, .gid = s->gid };
}

/* Two sides connected to each other: `a` sends from PSN `a_psn` to `b` expecting `b_epsn`,
 * `a` at path MTU `a_mtu` and `b` at `b_mtu`. */
static void pair(struct side *a, struct side *b, int b_access, uint32_t a_psn, uint32_t b_epsn,
		 enum ibv_mtu a_mtu, enum ibv_mtu b_mtu)
{
	open_side(a, 0, ALL_REMOTE);
	open_side(b, 1, b_access);
	struct info ia = info_of(a), ib = info_of(b);
	connect_to(a, &ib, 0x2000, a_psn, a_mtu);
	connect_to(b, &ia, b_epsn, 0x2000, b_mtu);
}

/* One completion within 10 s (0 on success, -1 when none came). */
static int one_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n > 0)
			return 0;
		if (n < 0)
			die("ibv_poll_cq");
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			return -1;
	}
}

static void post(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, wr, &bad);
	if (rc)
		printf("post_send: rc=%d\n", rc);
}

static struct ibv_send_wr rdma(uint64_t id, enum ibv_wr_opcode op, struct ibv_sge *sge,
			       uint64_t remote, uint32_t rkey)
{
	return (struct ibv_send_wr){ .wr_id = id, .sg_list = sge, .num_sge = 1, .opcode = op,
				     .send_flags = IBV_SEND_SIGNALED,
				     .wr.rdma = { .remote_addr = remote, .rkey = rkey } };
}

/* Prints a completion: every field for a success, the defined ones for an error. */
static void show(const char *what, struct ibv_cq *cq, struct ibv_qp *qp)
{
	struct ibv_wc wc;
	if (one_wc(cq, &wc)) {
		printf("%s: no completion in 10 s\n", what);
		return;
	}
	if (wc.status == IBV_WC_SUCCESS)
		printf("%s: wr_id=%llu status=%s opcode=%d byte_len=%u qp ok=%s flags=%d\n", what,
		       (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode,
		       wc.byte_len, wc.qp_num == qp->qp_num ? "yes" : "no", wc.wc_flags);
	else
		printf("%s: wr_id=%llu status=%s qp ok=%s\n", what, (unsigned long long)wc.wr_id,
		       ibv_wc_status_str(wc.status), wc.qp_num == qp->qp_num ? "yes" : "no");
}

static void fill(char *p, int n, int seed)
{
	for (int i = 0; i < n; i++)
		p[i] = (char)(i * 31 + seed);
}

static void order(void)
{
	struct side a, b;
	pair(&a, &b, ALL_REMOTE, 0x100, 0x100, IBV_MTU_1024, IBV_MTU_1024);
	struct ibv_sge rs = { .addr = (uintptr_t)b.buf + 6144, .length = 64, .lkey = b.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 77, .sg_list = &rs, .num_sge = 1 }, *rbad;
	if (ibv_post_recv(b.qp, &rwr, &rbad))
		die("post_recv");
	fill(a.buf, 4096, 3);
	memcpy(a.buf + 4096, "in order", 8);
	struct ibv_sge ws = { .addr = (uintptr_t)a.buf, .length = 4096, .lkey = a.mr->lkey };
	struct ibv_sge ss = { .addr = (uintptr_t)a.buf + 4096, .length = 8, .lkey = a.mr->lkey };
	struct ibv_send_wr w = rdma(1, IBV_WR_RDMA_WRITE, &ws, (uintptr_t)b.buf, b.mr->rkey);
	struct ibv_send_wr s = { .wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED };
	post(a.qp, &w);
	post(a.qp, &s);
	show("order: receive", b.cq, b.qp);
	printf("order: write landed before the send: %s, send bytes: %s\n",
	       memcmp(a.buf, b.buf, 4096) ? "no" : "yes",
	       memcmp(b.buf + 6144, "in order", 8) ? "no" : "yes");
	show("order: write", a.cq, a.qp);
	show("order: send", a.cq, a.qp);
	close_side(&a);
	close_side(&b);
}

static void own_rkey(void)
{
	struct side a, b;
	pair(&a, &b, ALL_REMOTE, 0x100, 0x100, IBV_MTU_1024, IBV_MTU_1024);
	fill(a.buf, 64, 5);
	struct ibv_sge ws = { .addr = (uintptr_t)a.buf, .length = 64, .lkey = a.mr->lkey };
	/* The bug: the requester's own key, not the key the peer sent. */
	struct ibv_send_wr w = rdma(3, IBV_WR_RDMA_WRITE, &ws, (uintptr_t)b.buf, a.mr->rkey);
	post(a.qp, &w);
	show("own-rkey", a.cq, a.qp);
	int touched = 0;
	for (int i = 0; i < 64; i++)
		touched |= b.buf[i];
	printf("own-rkey: peer memory untouched: %s\n", touched ? "no" : "yes");
	close_side(&a);
	close_side(&b);
}

static void stale(void)
{
	struct side a, b;
	pair(&a, &b, ALL_REMOTE, 0x100, 0x100, IBV_MTU_1024, IBV_MTU_1024);
	uint32_t old = b.mr->rkey;
	if (ibv_dereg_mr(b.mr))
		die("dereg_mr");
	b.mr = NULL;
	fill(a.buf, 64, 7);
	struct ibv_sge ws = { .addr = (uintptr_t)a.buf, .length = 64, .lkey = a.mr->lkey };
	struct ibv_send_wr w = rdma(4, IBV_WR_RDMA_WRITE, &ws, (uintptr_t)b.buf, old);
	post(a.qp, &w);
	show("stale", a.cq, a.qp);
	int touched = 0;
	for (int i = 0; i < 64; i++)
		touched |= b.buf[i];
	printf("stale: deregistered memory untouched: %s\n", touched ? "no" : "yes");
	close_side(&a);
	close_side(&b);
}

static void atomic_without_right(void)
{
	struct side a, b;
	pair(&a, &b, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 0x100, 0x100, IBV_MTU_1024,
	     IBV_MTU_1024);
	uint64_t *word = (uint64_t *)(b.buf + 64);
	*word = 41;
	struct ibv_sge s = { .addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey };
	struct ibv_send_wr w = { .wr_id = 5, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.atomic = { .remote_addr = (uintptr_t)word, .compare_add = 1,
						.rkey = b.mr->rkey } };
	post(a.qp, &w);
	show("atomic", a.cq, a.qp);
	printf("atomic: word unchanged: %s\n", *word == 41 ? "yes" : "no");
	close_side(&a);
	close_side(&b);
}

static void read_and_swap(void)
{
	struct side a, b;
	pair(&a, &b, ALL_REMOTE, 0x100, 0x100, IBV_MTU_1024, IBV_MTU_1024);
	fill(b.buf, 3000, 9);
	struct ibv_sge rs = { .addr = (uintptr_t)a.buf, .length = 3000, .lkey = a.mr->lkey };
	struct ibv_send_wr r = rdma(6, IBV_WR_RDMA_READ, &rs, (uintptr_t)b.buf, b.mr->rkey);
	post(a.qp, &r);
	show("read", a.cq, a.qp);
	printf("read: bytes: %s\n", memcmp(a.buf, b.buf, 3000) ? "wrong" : "right");
	uint64_t *word = (uint64_t *)(b.buf + 4096), *orig = (uint64_t *)(a.buf + 4096);
	*word = 7;
	*orig = 0;
	struct ibv_sge cs = { .addr = (uintptr_t)orig, .length = 8, .lkey = a.mr->lkey };
	struct ibv_send_wr c = { .wr_id = 7, .sg_list = &cs, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.atomic = { .remote_addr = (uintptr_t)word, .compare_add = 7,
						.swap = 99, .rkey = b.mr->rkey } };
	post(a.qp, &c);
	show("cmp_swap", a.cq, a.qp);
	printf("cmp_swap: original %llu, now %llu\n", (unsigned long long)*orig,
	       (unsigned long long)*word);
	close_side(&a);
	close_side(&b);
}

static void psn_mistake(void)
{
	struct side a, b;
	pair(&a, &b, ALL_REMOTE, 0x200, 0x100, IBV_MTU_1024, IBV_MTU_1024);
	fill(a.buf, 4096, 11);
	struct ibv_sge ws = { .addr = (uintptr_t)a.buf, .length = 4096, .lkey = a.mr->lkey };
	struct ibv_send_wr w = rdma(8, IBV_WR_RDMA_WRITE, &ws, (uintptr_t)b.buf, b.mr->rkey);
	post(a.qp, &w);
	show("psn", a.cq, a.qp);
	close_side(&a);
	close_side(&b);
}

static void mtu_mistake(void)
{
	struct side a, b;
	pair(&a, &b, ALL_REMOTE, 0x100, 0x100, IBV_MTU_1024, IBV_MTU_256);
	fill(a.buf, 1024, 13);
	struct ibv_sge ws = { .addr = (uintptr_t)a.buf, .length = 1024, .lkey = a.mr->lkey };
	struct ibv_send_wr w = rdma(9, IBV_WR_RDMA_WRITE, &ws, (uintptr_t)b.buf, b.mr->rkey);
	post(a.qp, &w);
	show("mtu", a.cq, a.qp);
	close_side(&a);
	close_side(&b);
}

static void full_read(int fd, void *p, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = read(fd, (char *)p + done, n - done);
		if (r <= 0)
			die("read from the pipe");
		done += (size_t)r;
	}
}

/* The peer is a child process that opens softverbs1, connects, says so and waits to be
 * killed; the parent WRITEs once (it works), kills it, and WRITEs again. */
static void dead_peer(void)
{
	int to_child[2], to_parent[2];
	if (pipe(to_child) || pipe(to_parent))
		die("pipe");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		struct side b;
		open_side(&b, 1, ALL_REMOTE);
		struct info mine = info_of(&b), theirs;
		if (write(to_parent[1], &mine, sizeof(mine)) != sizeof(mine))
			_exit(9);
		full_read(to_child[0], &theirs, sizeof(theirs));
		connect_to(&b, &theirs, 0x100, 0x100, IBV_MTU_1024);
		char ok = 1;
		if (write(to_parent[1], &ok, 1) != 1)
			_exit(9);
		for (int i = 0; i < 600; i++)
			sleep(1);
		_exit(0);
	}
	struct side a;
	open_side(&a, 0, ALL_REMOTE);
	struct info mine = info_of(&a), theirs;
	full_read(to_parent[0], &theirs, sizeof(theirs));
	if (write(to_child[1], &mine, sizeof(mine)) != sizeof(mine))
		die("write to the pipe");
	connect_to(&a, &theirs, 0x100, 0x100, IBV_MTU_1024);
	char ok;
	full_read(to_parent[0], &ok, 1);
	fill(a.buf, 64, 17);
	struct ibv_sge ws = { .addr = (uintptr_t)a.buf, .length = 64, .lkey = a.mr->lkey };
	struct ibv_send_wr w = rdma(10, IBV_WR_RDMA_WRITE, &ws, theirs.addr, theirs.rkey);
	post(a.qp, &w);
	show("dead: before the kill", a.cq, a.qp);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	w.wr_id = 11;
	post(a.qp, &w);
	show("dead: after the kill", a.cq, a.qp);
	close_side(&a);
}

static void responder_in_err(void)
{
	struct side a, b;
	pair(&a, &b, ALL_REMOTE, 0x100, 0x100, IBV_MTU_1024, IBV_MTU_1024);
	struct ibv_qp_attr e = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(b.qp, &e, IBV_QP_STATE))
		die("modify the responder to ERR");
	fill(a.buf, 64, 19);
	struct ibv_sge ws = { .addr = (uintptr_t)a.buf, .length = 64, .lkey = a.mr->lkey };
	struct ibv_send_wr w = rdma(12, IBV_WR_RDMA_WRITE, &ws, (uintptr_t)b.buf, b.mr->rkey);
	post(a.qp, &w);
	show("err", a.cq, a.qp);
	int touched = 0;
	for (int i = 0; i < 64; i++)
		touched |= b.buf[i];
	printf("err: responder memory untouched: %s\n", touched ? "no" : "yes");
	close_side(&a);
	close_side(&b);
}

static void chained_list(void)
{
	struct side a, b;
	open_side_len(&a, 0, ALL_REMOTE, BIG);
	open_side_len(&b, 1, ALL_REMOTE, BIG);
	struct info ia = info_of(&a), ib = info_of(&b);
	connect_to(&a, &ib, 0x2000, 0x100, IBV_MTU_1024);
	connect_to(&b, &ia, 0x100, 0x2000, IBV_MTU_1024);
	fill(a.buf, BIG, 23);
	const uint32_t half = BIG / 4;
	struct ibv_sge sg[4];
	struct ibv_send_wr w[4];
	for (int i = 0; i < 4; i++) {
		sg[i] = (struct ibv_sge){ .addr = (uintptr_t)a.buf + i * half, .length = half,
					  .lkey = a.mr->lkey };
		w[i] = rdma(20 + i, IBV_WR_RDMA_WRITE, &sg[i], (uintptr_t)b.buf + i * half,
			    b.mr->rkey);
		w[i].next = i < 3 ? &w[i + 1] : NULL;
	}
	post(a.qp, &w[0]);
	for (int i = 0; i < 4; i++)
		show("list", a.cq, a.qp);
	printf("list: bytes: %s\n", memcmp(a.buf, b.buf, BIG) ? "wrong" : "right");
	close_side(&a);
	close_side(&b);
}

/* rdma-core 45's FLUSH, absent from rdma-core 44's header. */
#define ACCESS_FLUSH_GLOBAL (1 << 8)
#define ACCESS_FLUSH_PERSISTENT (1 << 9)
#define QP_EX_WITH_FLUSH (1 << 11)
#define FLUSH_GLOBAL 1
#define FLUSH_PERSISTENT 2
#define FLUSH_RANGE 0
typedef void (*wr_flush_fn)(struct ibv_qp_ex *, uint32_t, uint64_t, size_t, uint8_t, uint8_t);

/* A pair whose `a` QP has the ibv_wr_* API (RDMA WRITE, ATOMIC WRITE, FLUSH) and whose `b` QP
 * takes FLUSHes for global visibility. */
static struct ibv_qp_ex *pair_ex(struct side *a, struct side *b)
{
	open_side(a, 0, ALL_REMOTE);
	open_side(b, 1, ALL_REMOTE | ACCESS_FLUSH_GLOBAL);
	ibv_destroy_qp(a->qp);
	struct ibv_qp_init_attr_ex qi = {
		.send_cq = a->cq, .recv_cq = a->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = a->pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE |
				  QP_EX_WITH_FLUSH };
	a->qp = ibv_create_qp_ex(a->ctx, &qi);
	struct ibv_qp_ex *x = a->qp ? ibv_qp_to_qp_ex(a->qp) : NULL;
	if (!x)
		die("ibv_create_qp_ex with ATOMIC_WRITE and FLUSH");
	qp_access = ALL_REMOTE | ACCESS_FLUSH_GLOBAL;
	struct info ia = info_of(a), ib = info_of(b);
	connect_to(a, &ib, 0x2000, 0x100, IBV_MTU_1024);
	connect_to(b, &ia, 0x100, 0x2000, IBV_MTU_1024);
	return x;
}

static void atomic_write(void)
{
	struct side a, b;
	struct ibv_qp_ex *x = pair_ex(&a, &b);
	memset(b.buf, 0x5a, 256);
	ibv_wr_start(x);
	x->wr_id = 30;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, b.mr->rkey, (uintptr_t)b.buf + 64, "ABCDEFGH");
	if (ibv_wr_complete(x))
		die("ibv_wr_complete");
	show("atomic-write", a.cq, a.qp);
	int around = 1;
	for (int i = 0; i < 256; i++)
		around &= (i >= 64 && i < 72) || b.buf[i] == 0x5a;
	printf("atomic-write: bytes: %s, around them untouched: %s\n",
	       memcmp(b.buf + 64, "ABCDEFGH", 8) ? "wrong" : "right", around ? "yes" : "no");
	ibv_wr_start(x);
	x->wr_id = 31;
	ibv_wr_atomic_write(x, b.mr->rkey, (uintptr_t)b.buf + 132, "misalign");
	if (ibv_wr_complete(x))
		die("ibv_wr_complete");
	show("atomic-write: misaligned", a.cq, a.qp);
	printf("atomic-write: misaligned word unchanged: %s\n",
	       b.buf[132] == 0x5a && b.buf[139] == 0x5a ? "yes" : "no");
	close_side(&a);
	close_side(&b);
	qp_access = ALL_REMOTE;
}

static void flush(void)
{
	struct side a, b;
	struct ibv_qp_ex *x = pair_ex(&a, &b);
	wr_flush_fn wr_flush = *(wr_flush_fn *)(&x->wr_atomic_write + 1);
	if (!wr_flush)
		die("no wr_flush after wr_atomic_write");
	fill(a.buf, 4096, 11);
	ibv_wr_start(x);
	x->wr_id = 40;
	x->wr_flags = 0;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 1000);
	ibv_wr_set_sge(x, a.mr->lkey, (uintptr_t)a.buf, 4096);
	x->wr_id = 41;
	x->wr_flags = IBV_SEND_SIGNALED;
	wr_flush(x, b.mr->rkey, (uintptr_t)b.buf + 1000, 4096, FLUSH_GLOBAL, FLUSH_RANGE);
	if (ibv_wr_complete(x))
		die("ibv_wr_complete");
	show("flush", a.cq, a.qp);
	printf("flush: the write's bytes: %s\n", memcmp(a.buf, b.buf + 1000, 4096) ? "wrong" : "right");
	struct ibv_device_attr_ex dx;
	if (ibv_query_device_ex(a.ctx, NULL, &dx))
		die("ibv_query_device_ex");
	printf("flush: device_cap_flags_ex: FLUSH_GLOBAL %s, FLUSH_PERSISTENT %s, ATOMIC_WRITE %s\n",
	       dx.device_cap_flags_ex & (1ULL << 38) ? "yes" : "no",
	       dx.device_cap_flags_ex & (1ULL << 39) ? "yes" : "no",
	       dx.device_cap_flags_ex & (1ULL << 40) ? "yes" : "no");
	char *mem = NULL;
	if (posix_memalign((void **)&mem, 4096, 4096))
		die("posix_memalign");
	errno = 0;
	struct ibv_mr *pmem = ibv_reg_mr(a.pd, mem, 4096, ACCESS_FLUSH_PERSISTENT);
	printf("flush: a persistent MR: %s errno=%d\n", pmem ? "registered" : "refused", errno);
	struct ibv_mr *gmem = ibv_reg_mr(a.pd, mem, 4096, ACCESS_FLUSH_GLOBAL);
	printf("flush: a global-visibility MR: %s\n", gmem ? "registered" : "refused");
	if (gmem)
		ibv_dereg_mr(gmem);
	free(mem);
	struct ibv_qp_init_attr_ex ud = {
		.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = a.pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | QP_EX_WITH_FLUSH };
	errno = 0;
	struct ibv_qp *udqp = ibv_create_qp_ex(a.ctx, &ud);
	printf("flush: a UD QP with FLUSH: %s errno=%d\n", udqp ? "created" : "refused", errno);
	ibv_wr_start(x);
	x->wr_id = 42;
	wr_flush(x, b.mr->rkey, (uintptr_t)b.buf, 64, FLUSH_PERSISTENT, FLUSH_RANGE);
	if (ibv_wr_complete(x))
		die("ibv_wr_complete");
	show("flush: persistent", a.cq, a.qp);
	close_side(&a);
	close_side(&b);
	qp_access = ALL_REMOTE;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *only = argc > 1 ? argv[1] : NULL;
#define CASE(name, fn)                                   \
	if (!only || !strcmp(only, name))                \
		fn();
	CASE("order", order);
	CASE("own-rkey", own_rkey);
	CASE("stale", stale);
	CASE("atomic", atomic_without_right);
	CASE("read", read_and_swap);
	CASE("psn", psn_mistake);
	CASE("mtu", mtu_mistake);
	CASE("dead", dead_peer);
	CASE("err", responder_in_err);
	CASE("list", chained_list);
	CASE("atomic-write", atomic_write);
	CASE("flush", flush);
	printf("done\n");
	return 0;
}
