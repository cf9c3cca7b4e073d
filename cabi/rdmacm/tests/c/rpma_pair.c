/* rpma_pair.c: librpma (PMDK's remote memory library) as its users run it, a server and its
 * clients, each a process. librpma connects with librdmacm: the server's connection id comes
 * from its endpoint's (listener's) channel and is moved to a channel of the connection's own
 * (rdma_migrate_id) after rdma_accept; it then waits there for ESTABLISHED while nobody reads
 * the endpoint's channel; the client's synchronous id is moved to a channel after it connected.
 *
 * Usage: rpma_pair server ADDR PORT N     serve N connections, one after the other
 *        rpma_pair client ADDR PORT K     client number K (1..255)
 *
 * Each connection: the client's connection request carries K as private data; the server
 * posts a receive before it accepts, and accepts with its 4 KiB memory region's descriptor as
 * private data (its size first). Each side gets the other's private data as the kernel's CM
 * gives it, the whole field of the CM message it came in (zeros after what was sent): 56 bytes
 * from a REQ (92 less the CM's IP header), 196 from a REP. The client writes 4 KiB of K's pattern there (rpma_write), makes it visible
 * (rpma_flush, RPMA_FLUSH_TYPE_VISIBILITY), reads it back (rpma_read) and sends a message
 * saying so (rpma_send); the server checks every byte of its region against K's pattern and
 * answers with the sum of its bytes, which the client checks. Every completion's opcode,
 * status, op_context (wr_id) and byte count is checked. Then the client disconnects
 * (rpma_conn_disconnect), both sides see RPMA_CONN_CLOSED and delete the connection.
 * Every wait is bounded (10 s; the program fails and says what it waited for), and an alarm
 * ends the program after 60 s whatever it does. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <librpma.h>
#include <infiniband/verbs.h>

#define SIZE 4096
#define MSG 64
#define WAIT_MS 10000

#define CHECK_RPMA(x) do { int r_ = (x); if (r_) { fprintf(stderr, "line %d: %s: %s\n", \
	__LINE__, #x, rpma_err_2str(r_)); exit(1); } } while (0)
#define CHECK(x) do { if (!(x)) { fprintf(stderr, "line %d: %s failed\n", __LINE__, #x); \
	exit(1); } } while (0)

static const char *role;

/* Wait (at most WAIT_MS) until `fd` is readable, or fail saying for what. */
static void wait_fd(int fd, const char *what)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (poll(&p, 1, WAIT_MS) != 1) {
		fprintf(stderr, "%s: no %s within %d ms\n", role, what, WAIT_MS);
		exit(1);
	}
}

/* The connection's next event, which must be `want`. */
static void expect_event(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event e;
	int fd;

	CHECK_RPMA(rpma_conn_get_event_fd(conn, &fd));
	wait_fd(fd, rpma_utils_conn_event_2str(want));
	CHECK_RPMA(rpma_conn_next_event(conn, &e));
	if (e != want) {
		fprintf(stderr, "%s: event %s, wanted %s\n", role, rpma_utils_conn_event_2str(e),
			rpma_utils_conn_event_2str(want));
		exit(1);
	}
}

/* The next `n` completions of `cq` into `wc` (each wait bounded). */
static void get_wcs(struct rpma_cq *cq, int n, struct ibv_wc *wc)
{
	int got = 0, fd, r, k;

	CHECK_RPMA(rpma_cq_get_fd(cq, &fd));
	while (got < n) {
		r = rpma_cq_get_wc(cq, n - got, wc + got, &k);
		if (r == 0) {
			got += k;
			continue;
		}
		if (r != RPMA_E_NO_COMPLETION) {
			fprintf(stderr, "%s: rpma_cq_get_wc: %s\n", role, rpma_err_2str(r));
			exit(1);
		}
		wait_fd(fd, "completion");
		CHECK_RPMA(rpma_cq_wait(cq));
	}
}

/* Among `wc` (n of them), the one whose wr_id is `ctx`: it must have `op`, status success
 * and, unless `len` is -1, byte_len `len`. */
static void expect_wc(struct ibv_wc *wc, int n, const void *ctx, enum ibv_wc_opcode op, int len,
		      const char *what)
{
	for (int i = 0; i < n; i++) {
		if (wc[i].wr_id != (uintptr_t)ctx)
			continue;
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != op ||
		    (len >= 0 && wc[i].byte_len != (uint32_t)len)) {
			fprintf(stderr, "%s: %s: status %s, opcode %d (want %d), byte_len %u\n", role,
				what, ibv_wc_status_str(wc[i].status), wc[i].opcode, op,
				wc[i].byte_len);
			exit(1);
		}
		return;
	}
	fprintf(stderr, "%s: no completion for %s\n", role, what);
	exit(1);
}

/* Client K's pattern: byte i of its 4 KiB. */
static uint8_t pattern(int k, int i)
{
	return (uint8_t)(i * 7 + k * 13 + (i >> 8));
}

static void *alloc_buf(size_t n)
{
	void *p = NULL;

	CHECK(posix_memalign(&p, 4096, n) == 0);
	memset(p, 0, n);
	return p;
}

static struct rpma_peer *open_peer(const char *addr, enum rpma_util_ibv_context_type type)
{
	struct ibv_context *ctx;
	struct rpma_peer *peer;

	CHECK_RPMA(rpma_utils_get_ibv_context(addr, type, &ctx));
	CHECK_RPMA(rpma_peer_new(ctx, &peer));
	return peer;
}

static int server(const char *addr, const char *port, int n)
{
	static const char recv_ctx[1], send_ctx[1];
	struct rpma_peer *peer = open_peer(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL);
	uint8_t *mem = alloc_buf(SIZE), *msg = alloc_buf(2 * MSG);
	struct rpma_mr_local *mr, *msg_mr;
	struct rpma_ep *ep;
	size_t desc_size;
	char desc[1 + 255];
	int fd;

	CHECK_RPMA(rpma_mr_reg(peer, mem, SIZE, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC |
			       RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &mr));
	CHECK_RPMA(rpma_mr_reg(peer, msg, 2 * MSG, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV,
			       &msg_mr));
	CHECK_RPMA(rpma_mr_get_descriptor_size(mr, &desc_size));
	CHECK(desc_size < sizeof desc);
	desc[0] = (char)desc_size;
	CHECK_RPMA(rpma_mr_get_descriptor(mr, desc + 1));
	CHECK_RPMA(rpma_ep_listen(peer, addr, port, &ep));
	CHECK_RPMA(rpma_ep_get_fd(ep, &fd));
	for (int c = 0; c < n; c++) {
		struct rpma_conn_private_data pd = { .ptr = desc, .len = (uint8_t)(1 + desc_size) };
		struct rpma_conn_private_data req_pd;
		struct rpma_conn_req *req;
		struct rpma_conn *conn;
		struct rpma_cq *cq;
		struct ibv_wc wc[2];
		unsigned long sum = 0;
		int k;

		memset(mem, 0, SIZE);
		wait_fd(fd, "connection request");
		CHECK_RPMA(rpma_ep_next_conn_req(ep, NULL, &req));
		CHECK_RPMA(rpma_conn_req_get_private_data(req, &req_pd));
		CHECK(req_pd.len == 56);
		k = *(uint8_t *)req_pd.ptr;
		for (int i = 1; i < req_pd.len; i++)
			CHECK(((uint8_t *)req_pd.ptr)[i] == 0);
		CHECK_RPMA(rpma_conn_req_recv(req, msg_mr, 0, MSG, recv_ctx));
		CHECK_RPMA(rpma_conn_req_connect(&req, &pd, &conn));
		expect_event(conn, RPMA_CONN_ESTABLISHED);
		CHECK_RPMA(rpma_conn_get_cq(conn, &cq));
		get_wcs(cq, 1, wc);
		expect_wc(wc, 1, recv_ctx, IBV_WC_RECV, MSG, "the client's message");
		if (strcmp((char *)msg, "written, flushed, read") != 0) {
			fprintf(stderr, "server: client %d said \"%.*s\"\n", k, MSG, (char *)msg);
			return 1;
		}
		for (int i = 0; i < SIZE; i++) {
			if (mem[i] != pattern(k, i)) {
				fprintf(stderr, "server: client %d: byte %d is %u, not %u\n", k, i,
					mem[i], pattern(k, i));
				return 1;
			}
			sum += mem[i];
		}
		snprintf((char *)msg + MSG, MSG, "sum %lu", sum);
		CHECK_RPMA(rpma_send(conn, msg_mr, MSG, MSG, RPMA_F_COMPLETION_ALWAYS, send_ctx));
		get_wcs(cq, 1, wc);
		expect_wc(wc, 1, send_ctx, IBV_WC_SEND, -1, "the answer");
		expect_event(conn, RPMA_CONN_CLOSED);
		CHECK_RPMA(rpma_conn_disconnect(conn));
		CHECK_RPMA(rpma_conn_delete(&conn));
		printf("server: client %d: %d bytes as written, sum %lu, closed\n", k, SIZE, sum);
		fflush(stdout);
	}
	CHECK_RPMA(rpma_ep_shutdown(&ep));
	CHECK_RPMA(rpma_mr_dereg(&msg_mr));
	CHECK_RPMA(rpma_mr_dereg(&mr));
	CHECK_RPMA(rpma_peer_delete(&peer));
	free(mem);
	free(msg);
	return 0;
}

static int client(const char *addr, const char *port, int k)
{
	static const char write_ctx[1], flush_ctx[1], read_ctx[1], send_ctx[1], recv_ctx[1];
	struct rpma_peer *peer = open_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	uint8_t *src = alloc_buf(SIZE), *dst = alloc_buf(SIZE), *msg = alloc_buf(2 * MSG);
	uint8_t kb = (uint8_t)k;
	struct rpma_conn_private_data pd = { .ptr = &kb, .len = 1 }, srv_pd;
	struct rpma_mr_local *src_mr, *dst_mr, *msg_mr;
	struct rpma_mr_remote *remote;
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	struct rpma_cq *cq;
	struct ibv_wc wc[4];
	unsigned long sum = 0;
	size_t remote_size;
	int flush_type;
	char want[MSG];

	for (int i = 0; i < SIZE; i++) {
		src[i] = pattern(k, i);
		sum += src[i];
	}
	CHECK_RPMA(rpma_mr_reg(peer, src, SIZE, RPMA_MR_USAGE_WRITE_SRC, &src_mr));
	CHECK_RPMA(rpma_mr_reg(peer, dst, SIZE, RPMA_MR_USAGE_READ_DST, &dst_mr));
	CHECK_RPMA(rpma_mr_reg(peer, msg, 2 * MSG, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV,
			       &msg_mr));
	CHECK_RPMA(rpma_conn_req_new(peer, addr, port, NULL, &req));
	CHECK_RPMA(rpma_conn_req_recv(req, msg_mr, MSG, MSG, recv_ctx));
	CHECK_RPMA(rpma_conn_req_connect(&req, &pd, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);
	CHECK_RPMA(rpma_conn_get_private_data(conn, &srv_pd));
	CHECK(srv_pd.len == 196);
	CHECK_RPMA(rpma_mr_remote_from_descriptor((char *)srv_pd.ptr + 1, *(uint8_t *)srv_pd.ptr,
						  &remote));
	CHECK_RPMA(rpma_mr_remote_get_size(remote, &remote_size));
	CHECK_RPMA(rpma_mr_remote_get_flush_type(remote, &flush_type));
	CHECK(remote_size == SIZE);
	CHECK(flush_type & RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY);
	CHECK_RPMA(rpma_conn_get_cq(conn, &cq));

	CHECK_RPMA(rpma_write(conn, remote, 0, src_mr, 0, SIZE, RPMA_F_COMPLETION_ALWAYS,
			      write_ctx));
	CHECK_RPMA(rpma_flush(conn, remote, 0, SIZE, RPMA_FLUSH_TYPE_VISIBILITY,
			      RPMA_F_COMPLETION_ALWAYS, flush_ctx));
	get_wcs(cq, 2, wc);
	expect_wc(wc, 2, write_ctx, IBV_WC_RDMA_WRITE, -1, "rpma_write");
	/* librpma makes a flush to visibility an RDMA READ of the region (its "appliance
	 * persistency method") where the device has no native flush, as rxe and softverbs. */
	expect_wc(wc, 2, flush_ctx, IBV_WC_RDMA_READ, -1, "rpma_flush");
	CHECK_RPMA(rpma_read(conn, dst_mr, 0, remote, 0, SIZE, RPMA_F_COMPLETION_ALWAYS,
			     read_ctx));
	get_wcs(cq, 1, wc);
	expect_wc(wc, 1, read_ctx, IBV_WC_RDMA_READ, SIZE, "rpma_read");
	if (memcmp(src, dst, SIZE) != 0) {
		fprintf(stderr, "client %d: what rpma_read brought back differs\n", k);
		return 1;
	}
	strcpy((char *)msg, "written, flushed, read");
	CHECK_RPMA(rpma_send(conn, msg_mr, 0, MSG, RPMA_F_COMPLETION_ALWAYS, send_ctx));
	get_wcs(cq, 2, wc);
	expect_wc(wc, 2, send_ctx, IBV_WC_SEND, -1, "rpma_send");
	expect_wc(wc, 2, recv_ctx, IBV_WC_RECV, MSG, "the server's answer");
	snprintf(want, sizeof want, "sum %lu", sum);
	if (strcmp((char *)msg + MSG, want) != 0) {
		fprintf(stderr, "client %d: the server answered \"%.*s\", not \"%s\"\n", k, MSG,
			(char *)msg + MSG, want);
		return 1;
	}
	CHECK_RPMA(rpma_conn_disconnect(conn));
	expect_event(conn, RPMA_CONN_CLOSED);
	CHECK_RPMA(rpma_conn_delete(&conn));
	CHECK_RPMA(rpma_mr_remote_delete(&remote));
	CHECK_RPMA(rpma_mr_dereg(&msg_mr));
	CHECK_RPMA(rpma_mr_dereg(&dst_mr));
	CHECK_RPMA(rpma_mr_dereg(&src_mr));
	CHECK_RPMA(rpma_peer_delete(&peer));
	printf("client %d: written, flushed, read back, answered %s, closed\n", k, want);
	free(src);
	free(dst);
	free(msg);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: rpma_pair server|client ADDR PORT N|K\n");
		return 2;
	}
	alarm(60);
	role = argv[1];
	rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_ERROR);
	if (strcmp(role, "server") == 0)
		return server(argv[2], argv[3], atoi(argv[4]));
	return client(argv[2], argv[3], atoi(argv[4]));
}
