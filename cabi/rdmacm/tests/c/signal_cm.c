/* signal_cm.c: a blocking rdma_get_cm_event and a signal. The kernel's CM reads the event in
 * ucma_get_event with an interruptible wait, so a handler installed without SA_RESTART ends
 * the read (librdmacm's rdma_get_cm_event returns -1 with errno EINTR), and one installed with
 * SA_RESTART restarts it: the call carries on until an event comes.
 * Usage: signal_cm PORT MODE
 *   MODE  eintr:   SIGALRM's handler without SA_RESTART, the alarm in 1 s, no event coming:
 *                  -1 with EINTR after the signal (the alarm again every second: at most 5 s).
 *         restart: the handler with SA_RESTART; a second thread, 2 s in (after the alarm),
 *                  resolves an address on the channel: the call returns that ADDR_RESOLVED. */
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "cm_common.h"

static volatile sig_atomic_t alarms;
static int port;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static void *resolve_later(void *arg)
{
	struct rdma_cm_id *id = arg;
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	sleep(2);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	return NULL;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_alarm };
	struct itimerval every = { .it_interval = { 1, 0 }, .it_value = { 1, 0 } };
	struct itimerval off = { 0 };
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;
	struct timespec t0, t1;
	pthread_t t;
	int restart, r, err;

	CHECK(argc == 3);
	port = atoi(argv[1]);
	restart = strcmp(argv[2], "restart") == 0;
	CHECK(restart || strcmp(argv[2], "eintr") == 0);
	CHECK(ch = rdma_create_event_channel());
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = restart ? SA_RESTART : 0;
	CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
	if (restart)
		CHECK(pthread_create(&t, NULL, resolve_later, id) == 0);
	/* Repeating, so that a signal that came before the read began is followed by another. */
	CHECK(setitimer(ITIMER_REAL, &every, NULL) == 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = rdma_get_cm_event(ch, &e);
	err = errno;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
	if (restart) {
		CHECK(pthread_join(t, NULL) == 0);
		if (r != 0) {
			printf("rdma_get_cm_event: %d errno %d after %d alarms\n", r, err, (int)alarms);
			return 1;
		}
		printf("event %s status %d after %s\n", rdma_event_str(e->event), e->status,
		       alarms > 0 ? "an alarm" : "no alarm");
		CHECK(rdma_ack_cm_event(e) == 0);
	} else {
		if (r == 0) {
			printf("an event came: %s\n", rdma_event_str(e->event));
			return 1;
		}
		printf("rdma_get_cm_event: -1 %s after %s within 5 s: %s\n",
		       err == EINTR ? "EINTR" : strerror(err), alarms > 0 ? "an alarm" : "no alarm",
		       t1.tv_sec - t0.tv_sec <= 5 ? "yes" : "no");
	}
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("done\n");
	return 0;
}
