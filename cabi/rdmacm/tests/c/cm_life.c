/*
 * cm_life.c: a connection's life cycle on the CM, for cabi/rdmacm/tests/life.rs.
 *
 *   cm_life server PORT N RELISTEN_MS [hold|noaccept|busy|waitfirst|waitfirstbusy]
 *                                       accept N connections on PORT; between two, destroy the
 *                                       listening id right after the accept, sleep RELISTEN_MS
 *                                       and listen again before reading the next event (as
 *                                       perftest -R does); then print each connection's events
 *                                       until it got DISCONNECTED (then its QP's state, and
 *                                       rdma_disconnect it as rping's server does) and
 *                                       TIMEWAIT_EXIT (`hold`:
 *                                       print "holding" and sleep instead; `noaccept`: the same
 *                                       at the first CONNECT_REQUEST, without accepting; `busy`:
 *                                       spend RELISTEN_MS on the CPU instead of sleeping, as a
 *                                       server starved of CPU on a loaded machine; `waitfirst`
 *                                       and `waitfirstbusy`: wait for the connection's
 *                                       ESTABLISHED before the sleep or the spin)
 *   cm_life client ADDR PORT N MODE     connect N ids in turn, each as soon as the previous is
 *                                       ESTABLISHED; MODE `disconnect`: rdma_disconnect each and
 *                                       print its events until TIMEWAIT_EXIT; `wait`: print
 *                                       "waiting" and the events the server's end brings (and
 *                                       rdma_disconnect each at its DISCONNECTED); `hold`: print
 *                                       "holding" and sleep (the test kills it); `exit`: exit
 *                                       without disconnecting; `reqexit`: exit right after
 *                                       rdma_connect
 *
 * Every wait is bounded: no event within 10 s prints "no event within 10 s" and exits 2.
 */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define die(what) do { perror(what); exit(1); } while (0)
#define MAXC 8

static struct rdma_event_channel *ch;
static struct rdma_cm_id *conn[MAXC];
static double disc_at[MAXC];
/* The connections this side disconnected itself (rdma_disconnect before DISCONNECTED). */
static int initiated[MAXC];

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The next event (bounded); printed with the connection number kept in the id's context. */
static struct rdma_cm_event *next(void)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;
	if (poll(&p, 1, 10000) != 1) {
		printf("no event within 10 s\n");
		exit(2);
	}
	if (rdma_get_cm_event(ch, &e))
		die("rdma_get_cm_event");
	return e;
}

static void show(struct rdma_cm_event *e)
{
	int n = (int)(intptr_t)e->id->context;
	printf("conn %d: %s, status %d\n", n, rdma_event_str(e->event), e->status);
	fflush(stdout);
}

static struct rdma_cm_event *expect(enum rdma_cm_event_type want)
{
	struct rdma_cm_event *e = next();
	show(e);
	if (e->event != want)
		exit(1);
	return e;
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = { 0 };
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 4, NULL, NULL, 0);
	if (!pd || !cq)
		die("pd/cq");
	qa.send_cq = qa.recv_cq = cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, pd, &qa))
		die("rdma_create_qp");
}

static const char *qp_state(struct rdma_cm_id *id)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(id->qp, &a, IBV_QP_STATE, &ia))
		return "?";
	return a.qp_state == IBV_QPS_ERR ? "ERR" : a.qp_state == IBV_QPS_RTS ? "RTS" : "other";
}

/* Print events until every one of the n connections got DISCONNECTED and TIMEWAIT_EXIT. */
static void until_timewait(int n)
{
	int left = 2 * n;
	while (left > 0) {
		struct rdma_cm_event *e = next();
		int c = (int)(intptr_t)e->id->context;
		show(e);
		if (e->event == RDMA_CM_EVENT_DISCONNECTED) {
			disc_at[c] = now_ms();
			printf("conn %d: QP %s\n", c, qp_state(e->id));
			/* The peer disconnected: as rping's server, answer with rdma_disconnect, which
			 * moves the QP to ERR (the CM left it alone at the peer's DREQ). */
			if (!initiated[c]) {
				if (rdma_disconnect(e->id))
					die("rdma_disconnect");
				printf("conn %d: rdma_disconnect, QP %s\n", c, qp_state(e->id));
			}
		} else if (e->event == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
			printf("conn %d: timewait at least 500 ms: %s\n", c,
			       now_ms() - disc_at[c] >= 500 ? "yes" : "no");
		} else {
			exit(1);
		}
		fflush(stdout);
		rdma_ack_cm_event(e);
		left--;
	}
}

static void cleanup(int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_pd *pd = conn[i]->pd;
		struct ibv_cq *cq = conn[i]->send_cq;
		rdma_destroy_qp(conn[i]);
		rdma_destroy_id(conn[i]);
		ibv_destroy_cq(cq);
		ibv_dealloc_pd(pd);
	}
	rdma_destroy_event_channel(ch);
	printf("done\n");
}

/* Stay runnable for ms milliseconds (the CPU's, or waiting for it). */
static void spin_ms(int ms)
{
	double end = now_ms() + ms;
	while (now_ms() < end)
		;
}

static struct rdma_cm_id *listen_on(int port)
{
	struct rdma_cm_id *l;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (rdma_create_id(ch, &l, (void *)(intptr_t)-1, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(l, (struct sockaddr *)&a) || rdma_listen(l, 4))
		die("bind/listen");
	return l;
}

static int server(int port, int n, int relisten_ms, const char *mode)
{
	struct rdma_cm_id *l = listen_on(port);
	for (int i = 0; i < n; i++) {
		struct rdma_cm_event *e = next();
		if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			printf("conn %d: %s, status %d\n", i, rdma_event_str(e->event), e->status);
			return 1;
		}
		conn[i] = e->id;
		conn[i]->context = (void *)(intptr_t)i;
		show(e);
		if (!strcmp(mode, "noaccept")) {
			printf("holding\n");
			fflush(stdout);
			sleep(60);
			return 3;
		}
		make_qp(conn[i]);
		if (rdma_accept(conn[i], NULL))
			die("rdma_accept");
		rdma_ack_cm_event(e);
		/* As perftest -R: the listening id goes right after the accept, and the next one
		 * comes later; the client's next REQ is already on its way. */
		if (relisten_ms >= 0 && i + 1 < n) {
			rdma_destroy_id(l);
			l = NULL;
		}
		int waitfirst = !strncmp(mode, "waitfirst", 9);
		if (waitfirst)
			rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
		if (!l) {
			if (!strcmp(mode, "busy") || !strcmp(mode, "waitfirstbusy"))
				spin_ms(relisten_ms);
			else
				usleep(relisten_ms * 1000);
			l = listen_on(port);
		}
		if (!waitfirst)
			rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
	}
	rdma_destroy_id(l);
	if (!strcmp(mode, "hold")) {
		printf("holding\n");
		fflush(stdout);
		sleep(60);
		return 3;
	}
	until_timewait(n);
	cleanup(n);
	return 0;
}

static int client(const char *addr, int port, int n, const char *mode)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, addr, &a.sin_addr);
	for (int i = 0; i < n; i++) {
		struct rdma_conn_param cp = { .retry_count = 7, .rnr_retry_count = 7 };
		if (rdma_create_id(ch, &conn[i], (void *)(intptr_t)i, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_resolve_addr(conn[i], NULL, (struct sockaddr *)&a, 2000))
			die("rdma_resolve_addr");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
		if (rdma_resolve_route(conn[i], 2000))
			die("rdma_resolve_route");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
		make_qp(conn[i]);
		if (rdma_connect(conn[i], &cp))
			die("rdma_connect");
		if (!strcmp(mode, "reqexit")) {
			printf("exiting\n");
			return 0;
		}
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
	}
	if (!strcmp(mode, "hold")) {
		printf("holding\n");
		fflush(stdout);
		sleep(60);
		return 3;
	}
	if (!strcmp(mode, "exit")) {
		printf("exiting\n");
		return 0;
	}
	if (!strcmp(mode, "wait")) {
		printf("waiting\n");
		fflush(stdout);
	} else {
		for (int i = 0; i < n; i++) {
			if (rdma_disconnect(conn[i]))
				die("rdma_disconnect");
			initiated[i] = 1;
		}
	}
	until_timewait(n);
	cleanup(n);
	return 0;
}

int main(int argc, char **argv)
{
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argc == 6 ? argv[5] : "");
	if (argc == 6 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]);
	fprintf(stderr, "usage: cm_life server PORT N RELISTEN_MS [hold|noaccept|busy] | client ADDR PORT N MODE\n");
	return 1;
}
