/* sync_signal.c: a signal during a synchronous rdma_connect. librdmacm's synchronous calls wait
 * in ucma_complete, a blocking rdma_get_cm_event on the id's own channel: a handler installed
 * without SA_RESTART ends it (-1 with errno EINTR), one installed with SA_RESTART restarts it.
 * Usage: sync_signal PORT MODE
 * A listener on an event channel (lch) on PORT, a synchronous id (no channel) resolved to it;
 * SIGALRM every second from now (blocked in the server's thread: the client's wait takes it).
 *   eintr:   the handler without SA_RESTART; nobody answers the REQ: rdma_connect gives -1
 *            EINTR after the first alarm; then the server rejects the request it got.
 *   restart: the handler with SA_RESTART; the server's thread, 2 s in (after an alarm), rejects
 *            the request: rdma_connect gives -1 ECONNREFUSED (it carried on past the signal). */
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>
#include "cm_common.h"

static volatile sig_atomic_t alarms;
static struct rdma_event_channel *lch;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* The request on the listener's channel, rejected, its id destroyed. */
static void reject_request(void)
{
	struct rdma_cm_event *e;
	struct rdma_cm_id *child;

	CHECK(rdma_get_cm_event(lch, &e) == 0);
	CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST);
	child = e->id;
	CHECK(rdma_ack_cm_event(e) == 0);
	CHECK(rdma_reject(child, NULL, 0) == 0);
	CHECK(rdma_destroy_id(child) == 0);
}

static void *server(void *arg)
{
	(void)arg;
	sleep(2);
	reject_request();
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in any = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	struct sigaction sa = { .sa_handler = on_alarm };
	struct itimerval every = { .it_interval = { 1, 0 }, .it_value = { 1, 0 } };
	struct itimerval off = { 0 };
	struct rdma_conn_param param = { .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *listen, *id;
	sigset_t alrm;
	pthread_t t;
	int restart, r, err;

	CHECK(argc == 3);
	any.sin_port = dst.sin_port = htons(atoi(argv[1]));
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	restart = strcmp(argv[2], "restart") == 0;
	CHECK(restart || strcmp(argv[2], "eintr") == 0);
	CHECK(lch = rdma_create_event_channel());
	CHECK(rdma_create_id(lch, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&any) == 0);
	CHECK(rdma_listen(listen, 1) == 0);
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(rdma_resolve_route(id, 2000) == 0);

	sigemptyset(&sa.sa_mask);
	sa.sa_flags = restart ? SA_RESTART : 0;
	CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	if (restart) {
		/* The server's thread is born with SIGALRM blocked. */
		CHECK(pthread_sigmask(SIG_BLOCK, &alrm, NULL) == 0);
		CHECK(pthread_create(&t, NULL, server, NULL) == 0);
		CHECK(pthread_sigmask(SIG_UNBLOCK, &alrm, NULL) == 0);
	}
	CHECK(setitimer(ITIMER_REAL, &every, NULL) == 0);
	r = rdma_connect(id, &param);
	err = errno;
	CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
	printf("rdma_connect: %d %s after %s\n", r,
	       r == 0 ? "" : err == EINTR ? "EINTR" : err == ECONNREFUSED ? "ECONNREFUSED" : strerror(err),
	       alarms > 0 ? "an alarm" : "no alarm");
	if (restart)
		CHECK(pthread_join(t, NULL) == 0);
	else
		reject_request();
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(lch);
	printf("done\n");
	return 0;
}
