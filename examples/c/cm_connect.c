/*
 * cm_connect.c: an RDMA connection made with the connection manager (librdmacm), by IP address
 * and port as with sockets, then one SEND with its private-data greeting.
 *
 *   cm_connect server PORT          listen on PORT (any address), accept one connection,
 *                                   receive one message, wait for the client to disconnect
 *   cm_connect client ADDR PORT     connect to ADDR:PORT, send one message, disconnect
 *
 * On softverbs: `softverbs run -- ./cm_connect server 7471` and, in another terminal,
 * `softverbs run -- ./cm_connect client 127.0.0.1 7471` (docs/c.md, "The connection manager").
 * Build: cc -o cm_connect cm_connect.c -lrdmacm -libverbs
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

#define die(what) do { perror(what); exit(1); } while (0)

static struct rdma_event_channel *ch;

/* Wait for the next CM event, which must be `want`; return the event (acknowledge it later). */
static struct rdma_cm_event *expect(enum rdma_cm_event_type want)
{
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		die("rdma_get_cm_event");
	printf("event %s, status %d\n", rdma_event_str(e->event), e->status);
	if (e->event != want) {
		fprintf(stderr, "expected %s\n", rdma_event_str(want));
		exit(1);
	}
	return e;
}

/* What each side needs on the id's device: a PD, a CQ, a registered buffer, an RC QP. */
struct res { struct ibv_pd *pd; struct ibv_cq *cq; struct ibv_mr *mr; char buf[64]; };

static void setup(struct rdma_cm_id *id, struct res *r)
{
	struct ibv_qp_init_attr qa = { 0 };
	r->pd = ibv_alloc_pd(id->verbs);
	r->cq = ibv_create_cq(id->verbs, 4, NULL, NULL, 0);
	if (!r->pd || !r->cq)
		die("pd/cq");
	r->mr = ibv_reg_mr(r->pd, r->buf, sizeof(r->buf), IBV_ACCESS_LOCAL_WRITE);
	if (!r->mr)
		die("ibv_reg_mr");
	qa.send_cq = qa.recv_cq = r->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	/* The CM creates the QP and moves it INIT, then RTR/RTS as the connection is made. */
	if (rdma_create_qp(id, r->pd, &qa))
		die("rdma_create_qp");
}

static void wait_wc(struct res *r)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(r->cq, 1, &wc)) == 0)
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "completion: %s\n", n < 0 ? "poll failed" : ibv_wc_status_str(wc.status));
		exit(1);
	}
}

static void teardown(struct rdma_cm_id *id, struct res *r)
{
	rdma_destroy_qp(id);
	ibv_dereg_mr(r->mr);
	ibv_destroy_cq(r->cq);
	ibv_dealloc_pd(r->pd);
}

int main(int argc, char **argv)
{
	struct rdma_cm_id *id, *listen_id;
	struct rdma_conn_param cp = { 0 };
	struct rdma_cm_event *e;
	struct res r = { 0 };
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct ibv_sge sge;
	int server = argc == 3 && !strcmp(argv[1], "server");

	if (!server && !(argc == 4 && !strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server PORT | client ADDR PORT\n", argv[0]);
		return 2;
	}
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	if (server) {
		struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;
		if (rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		sin.sin_port = htons(atoi(argv[2]));
		if (rdma_bind_addr(listen_id, (struct sockaddr *)&sin) || rdma_listen(listen_id, 1))
			die("bind/listen");
		e = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
		id = e->id; /* a new id for this connection, on the device the request came to */
		printf("private data: %.*s\n", e->param.conn.private_data_len,
		       (const char *)e->param.conn.private_data);
		rdma_ack_cm_event(e);
		setup(id, &r);
		sge = (struct ibv_sge){ (uintptr_t)r.buf, sizeof(r.buf), r.mr->lkey };
		if (ibv_post_recv(id->qp, &wr, &bad)) /* before accepting: the SEND may come at once */
			die("ibv_post_recv");
		cp.responder_resources = cp.initiator_depth = 1;
		if (rdma_accept(id, &cp))
			die("rdma_accept");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
		wait_wc(&r);
		printf("received: %s\n", r.buf);
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED));
		teardown(id, &r);
		rdma_destroy_id(id);
		rdma_destroy_id(listen_id);
	} else {
		struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		struct addrinfo *ai;
		const char hello[] = "hello from the client";
		if (getaddrinfo(argv[2], argv[3], NULL, &ai))
			die("getaddrinfo");
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_resolve_addr(id, NULL, ai->ai_addr, 2000))
			die("rdma_resolve_addr");
		freeaddrinfo(ai);
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
		if (rdma_resolve_route(id, 2000))
			die("rdma_resolve_route");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
		setup(id, &r);
		cp.private_data = hello;
		cp.private_data_len = sizeof(hello);
		cp.responder_resources = cp.initiator_depth = 1;
		cp.retry_count = 7;
		cp.rnr_retry_count = 7;
		if (rdma_connect(id, &cp))
			die("rdma_connect");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
		strcpy(r.buf, "one SEND over the connection");
		sge = (struct ibv_sge){ (uintptr_t)r.buf, sizeof(r.buf), r.mr->lkey };
		if (ibv_post_send(id->qp, &wr, &bad))
			die("ibv_post_send");
		wait_wc(&r);
		if (rdma_disconnect(id))
			die("rdma_disconnect");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED));
		teardown(id, &r);
		rdma_destroy_id(id);
	}
	rdma_destroy_event_channel(ch);
	printf("done\n");
	return 0;
}
