/*
 * channel.c - a completion channel's fd as the kernel's completion event file behaves: epoll
 * finds it readable as soon as a completion reaches an armed CQ, ibv_get_cq_event on a
 * non-blocking fd with nothing queued fails with EAGAIN, a blocking one waits for the event,
 * a destroyed CQ's events are gone (no EIO later), and an idle program's threads other than
 * the NIC thread make no wake-ups (no pump). Each check prints one line; tests/channel.rs
 * compares them with the expected lines.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "verbs_common.h"

/* At once, with room for a loaded machine; without an event made readable at once the NIC
 * thread's next round comes up to 100 ms later. */
#define PROMPT_MS 20.0

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static const char *errname(int e)
{
	switch (e) {
	case 0: return "0";
	case EAGAIN: return "EAGAIN";
	case EIO: return "EIO";
	default: return "other";
	}
}

static void to_error(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		exit(6);
}

/* Voluntary and involuntary context switches of this process's threads other than the main
 * thread and the NIC threads (named "<device>-nic"). */
static long other_threads_switches(void)
{
	long total = 0;
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.' || atoi(e->d_name) == getpid())
			continue;
		char path[128], comm[64] = "", line[256];
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = 0;
		fclose(f);
		comm[strcspn(comm, "\n")] = 0;
		size_t n = strlen(comm);
		if (n >= 4 && strcmp(comm + n - 4, "-nic") == 0)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f)) {
			long v;
			if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
			    sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
				total += v;
		}
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return total;
}

struct later {
	struct ibv_qp *qp;
	struct ibv_recv_wr *wr;
	double posted;
};

static void *post_later(void *arg)
{
	struct later *l = arg;
	struct ibv_recv_wr *bad;
	usleep(20000);
	l->posted = now_ms();
	if (ibv_post_recv(l->qp, l->wr, &bad))
		exit(7);
	return NULL;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cqa = ibv_create_cq(ctx, 16, (void *)0xa, ch, 0);
	struct ibv_cq *cqb = ibv_create_cq(ctx, 16, (void *)0xb, ch, 0);
	struct ibv_qp_init_attr qi = { .send_cq = cqa, .recv_cq = cqa, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qi);
	qi.send_cq = qi.recv_cq = cqb;
	struct ibv_qp *b = ibv_create_qp(pd, &qi);
	if (!ctx || !pd || !mr || !ch || !cqa || !cqb || !a || !b)
		return 2;
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	connect_rc(a, b->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	connect_rc(b, a->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *ecq;
	void *ectx;
	struct ibv_wc wc[4];
	int n;

	/* Non-blocking, nothing queued: EAGAIN, as the kernel's event file answers a read. */
	int flags = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK);
	errno = 0;
	int rc = ibv_get_cq_event(ch, &ecq, &ectx);
	printf("non-blocking, none queued: rc=%d errno=%s\n", rc, errname(errno));

	/* epoll: a receive flushed by ibv_post_recv on a QP in error makes the fd readable at once. */
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ee = { .events = EPOLLIN, .data.u32 = 42 }, got;
	epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ee);
	printf("epoll before: %d\n", epoll_wait(ep, &got, 1, 0));
	to_error(a);
	ibv_req_notify_cq(cqa, 0);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 11, .sg_list = &sge, .num_sge = 1 }, *rbad;
	double t0 = now_ms();
	ibv_post_recv(a, &rwr, &rbad);
	int ready = epoll_wait(ep, &got, 1, 5000);
	double waited = now_ms() - t0;
	printf("epoll after the flush: %d (data %u), at once: %s\n", ready, got.data.u32,
	       waited < PROMPT_MS ? "yes" : "no");
	if (waited >= PROMPT_MS)
		fprintf(stderr, "epoll became readable %.3f ms after the post\n", waited);
	rc = ibv_get_cq_event(ch, &ecq, &ectx);
	printf("get_cq_event: rc=%d cq=%s context=%p\n", rc, ecq == cqa ? "a" : "?", ectx);
	ibv_ack_cq_events(ecq, 1);
	n = ibv_poll_cq(cqa, 4, wc);
	printf("flushed: n=%d wr_id=%llu status=%s\n", n, (unsigned long long)wc[0].wr_id,
	       ibv_wc_status_str(wc[0].status));
	errno = 0;
	rc = ibv_get_cq_event(ch, &ecq, &ectx);
	printf("taken, none left: rc=%d errno=%s epoll=%d\n", rc, errname(errno),
	       epoll_wait(ep, &got, 1, 0));

	/* Blocking: ibv_get_cq_event waits for an event another thread's verb makes. */
	fcntl(ch->fd, F_SETFL, flags & ~O_NONBLOCK);
	ibv_req_notify_cq(cqa, 0);
	rwr.wr_id = 12;
	struct later l = { .qp = a, .wr = &rwr };
	pthread_t th;
	pthread_create(&th, NULL, post_later, &l);
	rc = ibv_get_cq_event(ch, &ecq, &ectx);
	double woke = now_ms();
	pthread_join(th, NULL);
	printf("blocking get_cq_event: rc=%d cq=%s, at once: %s\n", rc, ecq == cqa ? "a" : "?",
	       woke - l.posted < PROMPT_MS ? "yes" : "no");
	if (woke - l.posted >= PROMPT_MS)
		fprintf(stderr, "ibv_get_cq_event returned %.3f ms after the post\n", woke - l.posted);
	ibv_ack_cq_events(ecq, 1);
	ibv_poll_cq(cqa, 4, wc);

	/* Idle: no thread but the NIC thread wakes (there is no pump). */
	long before = other_threads_switches();
	usleep(500000);
	printf("idle wake-ups of other threads: %ld\n", other_threads_switches() - before);

	/* A destroyed CQ's events are purged: nothing readable, EAGAIN, not EIO. */
	fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK);
	to_error(b);
	ibv_req_notify_cq(cqb, 0);
	rwr.wr_id = 13;
	ibv_post_recv(b, &rwr, &rbad);
	printf("b's event queued: %d\n", epoll_wait(ep, &got, 1, 5000));
	n = ibv_poll_cq(cqb, 4, wc);
	printf("b flushed: n=%d wr_id=%llu\n", n, (unsigned long long)wc[0].wr_id);
	ibv_destroy_qp(b);
	printf("destroy_cq(b): rc=%d\n", ibv_destroy_cq(cqb));
	printf("epoll after destroy: %d\n", epoll_wait(ep, &got, 1, 0));
	errno = 0;
	rc = ibv_get_cq_event(ch, &ecq, &ectx);
	printf("get_cq_event after destroy: rc=%d errno=%s\n", rc, errname(errno));

	close(ep);
	ibv_destroy_qp(a);
	ibv_destroy_cq(cqa);
	printf("destroy_comp_channel: rc=%d\n", ibv_destroy_comp_channel(ch));
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return 0;
}
