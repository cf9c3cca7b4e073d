/*
 * signal.c - a signal handler and a blocking ibv_get_cq_event, as the kernel's read of the
 * completion event file treats them: a handler installed without SA_RESTART (qperf's SIGALRM,
 * which ends a timed test) makes the call fail with EINTR; one installed with SA_RESTART lets
 * it carry on (SIGALRM every 50 ms meanwhile), and it returns the event that comes later. Each check prints one line;
 * tests/signal.rs compares them with the expected lines. A watchdog thread exits 9 if a wait
 * never ends.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static volatile sig_atomic_t handled;

static void on_alarm(int sig)
{
	(void)sig;
	handled++;
}

static void handler(int flags)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL))
		exit(5);
}

/* SIGALRM every ms milliseconds (0: none), as qperf's timer: a signal that comes before the
 * wait begins (a loaded machine) is followed by another. */
static void alarm_every(int ms)
{
	struct itimerval t = { .it_value = { .tv_sec = 0, .tv_usec = ms * 1000 },
			       .it_interval = { .tv_sec = 0, .tv_usec = ms * 1000 } };
	if (setitimer(ITIMER_REAL, &t, NULL))
		exit(6);
}

static void *watchdog(void *arg)
{
	(void)arg;
	sleep(10);
	printf("a wait never ended\n");
	exit(9);
}

struct later {
	struct ibv_qp *qp;
	struct ibv_recv_wr *wr;
};

/* A receive posted on a QP in error 400 ms from now: flushed, a completion on the armed CQ. */
static void *post_later(void *arg)
{
	struct later *l = arg;
	struct ibv_recv_wr *bad;
	usleep(400000);
	if (ibv_post_recv(l->qp, l->wr, &bad))
		exit(7);
	return NULL;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* Threads made here never take SIGALRM: it goes to the thread that waits. */
	sigset_t alrm;
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &alrm, NULL);
	pthread_t dog;
	pthread_create(&dog, NULL, watchdog, NULL);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, (void *)0xa, ch, 0);
	struct ibv_qp_init_attr qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qi);
	if (!ctx || !pd || !mr || !ch || !cq || !qp)
		return 1;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return 2;
	pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);

	/* Without SA_RESTART: the wait ends with EINTR once the handler ran. */
	handler(0);
	if (ibv_req_notify_cq(cq, 0))
		return 3;
	alarm_every(100);
	struct ibv_cq *got = NULL;
	void *gctx = NULL;
	errno = 0;
	int rc = ibv_get_cq_event(ch, &got, &gctx);
	int e = errno;
	alarm_every(0);
	printf("without SA_RESTART: rc=%d errno=%s handler ran: %s\n", rc,
	       e == EINTR ? "EINTR" : "other", handled > 0 ? "yes" : "no");

	/* With SA_RESTART: the handler runs, the wait carries on and takes the later event. */
	handler(SA_RESTART);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 11, .sg_list = &sge, .num_sge = 1 };
	struct later l = { qp, &wr };
	pthread_t t;
	pthread_sigmask(SIG_BLOCK, &alrm, NULL);
	pthread_create(&t, NULL, post_later, &l);
	pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
	int before = handled;
	alarm_every(50);
	rc = ibv_get_cq_event(ch, &got, &gctx);
	alarm_every(0);
	printf("with SA_RESTART: rc=%d cq=%s context=%p handler ran meanwhile: %s\n", rc,
	       got == cq ? "cq" : "other", gctx, handled > before ? "yes" : "no");
	pthread_join(t, NULL);
	ibv_ack_cq_events(cq, 1);
	struct ibv_wc wc;
	int n = ibv_poll_cq(cq, 1, &wc);
	printf("flushed: n=%d wr_id=%d status=%s\n", n, n == 1 ? (int)wc.wr_id : -1,
	       n == 1 ? ibv_wc_status_str(wc.status) : "-");
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_destroy_comp_channel(ch) ||
	    ibv_dereg_mr(mr) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		return 8;
	return 0;
}
