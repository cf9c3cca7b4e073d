/*
 * mw.c - memory windows as a C program uses them, for tests/mw.rs, which runs each case in a
 * process of its own with direct reach on and off and expects the same lines both ways (as
 * rxe gives them). Two devices of one process, a fresh RC pair per case; b's buffer is
 * registered with IBV_ACCESS_MW_BIND and a opens a window onto 256 bytes of it:
 *   caps      ibv_query_device: IBV_DEVICE_MEM_WINDOW, _TYPE_2B and max_mw, as rxe reports;
 *   type1     ibv_alloc_mw(IBV_MW_TYPE_1), ibv_bind_mw (its IBV_WC_BIND_MW completion and the
 *             next rkey), a WRITE through the window and one byte past it (REM_ACCESS_ERR),
 *             ibv_dereg_mr of the MR under a bound window (EINVAL), ibv_dealloc_mw;
 *   type2     ibv_create_qp_ex with BIND_MW, LOCAL_INV and SEND_WITH_INV: ibv_wr_bind_mw, a
 *             WRITE through the window, ibv_wr_send_inv of its rkey (IBV_WC_WITH_INV and the
 *             rkey, ibv_wc_read_invalidated_rkey's field), then a WRITE through it refused;
 *   localinv  IBV_WR_BIND_MW and IBV_WR_LOCAL_INV by ibv_post_send (IBV_WC_LOCAL_INV), then
 *             the window's rkey refused.
 * Only wr_id, status and qp_num are printed for failed completions. Every wait is bounded.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define LEN 8192
#define WIN 4096
#define WIN_LEN 256
#define ALL_REMOTE (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define OPS (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_BIND_MW | \
	     IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV)

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

static void die(const char *what)
{
	printf("failed: %s (errno %d)\n", what, errno);
	exit(9);
}

static void open_side(struct side *s, int index)
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
	if (!s->pd || !s->cq || posix_memalign((void **)&s->buf, 4096, LEN))
		die("pd, cq or buffer");
	memset(s->buf, 0, LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, LEN,
			   IBV_ACCESS_LOCAL_WRITE | ALL_REMOTE | IBV_ACCESS_MW_BIND);
	struct ibv_qp_init_attr_ex qi = { .send_cq = s->cq, .recv_cq = s->cq,
		.qp_type = IBV_QPT_RC, .pd = s->pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = OPS,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 } };
	s->qp = ibv_create_qp_ex(s->ctx, &qi);
	if (!s->mr || !s->qp || ibv_query_gid(s->ctx, 1, 1, &s->gid))
		die("mr, qp or gid");
	s->qpx = ibv_qp_to_qp_ex(s->qp);
	if (!s->qpx)
		die("ibv_qp_to_qp_ex");
}

static void connect_to(struct side *s, const struct side *to)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = ALL_REMOTE };
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS))
		die("modify to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = to->qp->qp_num;
	a.rq_psn = 0x2000; a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = to->gid; a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER))
		die("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.timeout = 10; a.retry_cnt = 3; a.rnr_retry = 3;
	a.max_rd_atomic = 1; a.sq_psn = 0x2000;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify to RTS");
}

static void pair(struct side *a, struct side *b)
{
	open_side(a, 0);
	open_side(b, 1);
	connect_to(a, b);
	connect_to(b, a);
}

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

/* Prints a completion: every field for a success, the defined ones for an error. */
static struct ibv_wc show(const char *what, struct ibv_cq *cq, struct ibv_qp *qp)
{
	struct ibv_wc wc;
	memset(&wc, 0, sizeof(wc));
	if (one_wc(cq, &wc)) {
		printf("%s: no completion in 10 s\n", what);
		return wc;
	}
	if (wc.status == IBV_WC_SUCCESS)
		printf("%s: wr_id=%llu status=%s opcode=%d byte_len=%u qp ok=%s flags=%d\n", what,
		       (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode,
		       wc.byte_len, wc.qp_num == qp->qp_num ? "yes" : "no", wc.wc_flags);
	else
		printf("%s: wr_id=%llu status=%s qp ok=%s\n", what, (unsigned long long)wc.wr_id,
		       ibv_wc_status_str(wc.status), wc.qp_num == qp->qp_num ? "yes" : "no");
	return wc;
}

/* a writes `len` bytes of its buffer to `remote` under `rkey`, signaled as `id`. */
static void write_to(struct side *a, uint64_t id, uint64_t remote, uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)a->buf, .length = len, .lkey = a->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = remote, .rkey = rkey } }, *bad;
	int rc = ibv_post_send(a->qp, &wr, &bad);
	if (rc)
		printf("post_send: rc=%d\n", rc);
}

static struct ibv_mw_bind_info window(struct side *b)
{
	return (struct ibv_mw_bind_info){ .mr = b->mr, .addr = (uintptr_t)b->buf + WIN,
					  .length = WIN_LEN, .mw_access_flags = ALL_REMOTE };
}

static void caps(void)
{
	struct side a, b;
	pair(&a, &b);
	struct ibv_device_attr da;
	if (ibv_query_device(a.ctx, &da))
		die("ibv_query_device");
	printf("caps: MEM_WINDOW %s, TYPE_2B %s, max_mw>0 %s\n",
	       da.device_cap_flags & IBV_DEVICE_MEM_WINDOW ? "yes" : "no",
	       da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B ? "yes" : "no",
	       da.max_mw > 0 ? "yes" : "no");
}

static void type1(void)
{
	struct side a, b;
	pair(&a, &b);
	struct ibv_mw *mw = ibv_alloc_mw(b.pd, IBV_MW_TYPE_1);
	if (!mw)
		die("ibv_alloc_mw");
	uint32_t old = mw->rkey;
	struct ibv_mw_bind bind = { .wr_id = 70, .send_flags = IBV_SEND_SIGNALED,
				    .bind_info = window(&b) };
	printf("type1: bind rc=%d\n", ibv_bind_mw(b.qp, mw, &bind));
	printf("type1: new rkey is ibv_inc_rkey(old): %s\n",
	       mw->rkey == ibv_inc_rkey(old) ? "yes" : "no");
	show("type1: bind", b.cq, b.qp);
	strcpy(a.buf, "through the window");
	uint64_t base = (uintptr_t)b.buf + WIN;
	write_to(&a, 1, base + 8, mw->rkey, 19);
	show("type1: write", a.cq, a.qp);
	printf("type1: landed: %s\n", strcmp(b.buf + WIN + 8, "through the window") ? "no" : "yes");
	write_to(&a, 2, base + WIN_LEN - 8, mw->rkey, 9);
	show("type1: past the end", a.cq, a.qp);
	int rc = ibv_dereg_mr(b.mr);
	printf("type1: dereg_mr under a bound window: rc=%s\n", rc == EINVAL ? "EINVAL" : "other");
	rc = ibv_dealloc_mw(mw);
	printf("type1: dealloc_mw rc=%d, dereg_mr rc=%d\n", rc, ibv_dereg_mr(b.mr));
}

static void type2(void)
{
	struct side a, b;
	pair(&a, &b);
	struct ibv_mw *mw = ibv_alloc_mw(b.pd, IBV_MW_TYPE_2);
	if (!mw)
		die("ibv_alloc_mw type 2");
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_mw_bind_info info = window(&b);
	ibv_wr_start(b.qpx);
	b.qpx->wr_id = 71;
	b.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(b.qpx, mw, rkey, &info);
	printf("type2: wr_complete rc=%d\n", ibv_wr_complete(b.qpx));
	show("type2: bind", b.cq, b.qp);
	mw->rkey = rkey;
	strcpy(a.buf, "window two");
	uint64_t base = (uintptr_t)b.buf + WIN;
	write_to(&a, 3, base, rkey, 11);
	show("type2: write", a.cq, a.qp);
	printf("type2: landed: %s\n", strcmp(b.buf + WIN, "window two") ? "no" : "yes");

	struct ibv_sge rsge = { .addr = (uintptr_t)b.buf + 64, .length = 64, .lkey = b.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 72, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	if (ibv_post_recv(b.qp, &rwr, &rbad))
		die("ibv_post_recv");
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 4;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_inv(a.qpx, rkey);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 8);
	printf("type2: send_inv wr_complete rc=%d\n", ibv_wr_complete(a.qpx));
	show("type2: send_inv", a.cq, a.qp);
	struct ibv_wc wc = show("type2: receive", b.cq, b.qp);
	printf("type2: WITH_INV %s, invalidated rkey right: %s\n",
	       wc.wc_flags & IBV_WC_WITH_INV ? "yes" : "no",
	       wc.invalidated_rkey == rkey ? "yes" : "no");
	write_to(&a, 5, base, rkey, 8);
	show("type2: write after invalidation", a.cq, a.qp);
	printf("type2: dealloc_mw rc=%d\n", ibv_dealloc_mw(mw));
}

static void localinv(void)
{
	struct side a, b;
	pair(&a, &b);
	struct ibv_mw *mw = ibv_alloc_mw(b.pd, IBV_MW_TYPE_2);
	if (!mw)
		die("ibv_alloc_mw type 2");
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr bind = { .wr_id = 80, .opcode = IBV_WR_BIND_MW,
		.send_flags = IBV_SEND_SIGNALED,
		.bind_mw = { .mw = mw, .rkey = rkey, .bind_info = window(&b) } };
	struct ibv_send_wr inv = { .wr_id = 81, .opcode = IBV_WR_LOCAL_INV,
		.send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = rkey }, *bad;
	bind.next = &inv;
	printf("localinv: post_send rc=%d\n", ibv_post_send(b.qp, &bind, &bad));
	show("localinv: bind", b.cq, b.qp);
	show("localinv: local_inv", b.cq, b.qp);
	write_to(&a, 6, (uintptr_t)b.buf + WIN, rkey, 8);
	show("localinv: write after invalidation", a.cq, a.qp);
	printf("localinv: window untouched: %s\n", b.buf[WIN] == 0 ? "yes" : "no");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *only = argc > 1 ? argv[1] : NULL;
#define CASE(name, fn)                                   \
	if (!only || !strcmp(only, name))                \
		fn();
	CASE("caps", caps);
	CASE("type1", type1);
	CASE("type2", type2);
	CASE("localinv", localinv);
	printf("done\n");
	return 0;
}
