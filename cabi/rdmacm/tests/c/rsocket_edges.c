/* The rsocket API's edge cases from C (tests/rsocket.rs runs it): a thread blocked in rrecv
 * does not hold up another thread's rsend on the same rsocket; after the peer's rclose,
 * rrecv returns 0 (end of stream) and rsend fails with ECONNRESET, as rsockets does; after
 * our own rshutdown(SHUT_WR) the peer reads 0 yet can still answer, and our rsend is EPIPE;
 * a non-blocking rsocket gives EAGAIN; rpoll reports an rsocket and a pipe together; a
 * descriptor that is no rsocket is EBADF; a connect to a port nobody listens on is
 * ECONNREFUSED. Usage: rsocket_edges PORT UNUSED_PORT */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rsocket.h>

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "line %d: %s failed (errno %d)\n", \
	__LINE__, #x, errno); exit(1); } } while (0)

static int lfd;

static void *acceptor(void *out)
{
	int fd = raccept(lfd, NULL, NULL);

	CHECK(fd >= 0);
	*(int *)out = fd;
	return NULL;
}

static char got[16];

static void *reader(void *arg)
{
	int fd = *(int *)arg;

	CHECK(rrecv(fd, got, 4, MSG_WAITALL) == 4);
	return NULL;
}

static struct sockaddr_in addr_of(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* A connected pair over the listener: (client, server). */
static void pair(int port, int *c, int *s)
{
	pthread_t t;
	struct sockaddr_in a = addr_of(port);

	CHECK(pthread_create(&t, NULL, acceptor, s) == 0);
	*c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(*c >= 0);
	CHECK(rconnect(*c, (struct sockaddr *)&a, sizeof a) == 0);
	CHECK(pthread_join(t, NULL) == 0);
}

static const char *err_name(int e)
{
	switch (e) {
	case 0: return "";
	case EAGAIN: return "EAGAIN";
	case EBADF: return "EBADF";
	case EPIPE: return "EPIPE";
	case ECONNRESET: return "ECONNRESET";
	case ECONNREFUSED: return "ECONNREFUSED";
	case ENOTCONN: return "ENOTCONN";
	default: return "other";
	}
}

#define SHOW(what, call) do { errno = 0; long r_ = (long)(call); \
	printf("%s: %ld %s\n", what, r_, r_ < 0 ? err_name(errno) : ""); } while (0)

int main(int argc, char **argv)
{
	char buf[64];
	int c, s, one = 1;

	if (argc != 3)
		return 2;
	struct sockaddr_in la = addr_of(atoi(argv[1]));
	lfd = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(lfd >= 0);
	CHECK(rsetsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
	CHECK(rbind(lfd, (struct sockaddr *)&la, sizeof la) == 0);
	CHECK(rlisten(lfd, 4) == 0);

	/* 0: full duplex from two threads: one waits in rrecv, the other sends meanwhile. */
	pair(atoi(argv[1]), &c, &s);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, reader, &c) == 0);
	usleep(100000);
	SHOW("rsend while another thread waits in rrecv", rsend(c, "ping", 4, 0));
	memset(buf, 0, sizeof buf);
	SHOW("server rrecv", rrecv(s, buf, 4, MSG_WAITALL));
	SHOW("server rsend", rsend(s, "pong", 4, 0));
	CHECK(pthread_join(t, NULL) == 0);
	printf("the waiting thread got %s\n", got);
	CHECK(rclose(c) == 0 && rclose(s) == 0);

	/* 1: the peer closes. */
	pair(atoi(argv[1]), &c, &s);
	SHOW("rsend hello", rsend(c, "hello", 5, 0));
	memset(buf, 0, sizeof buf);
	SHOW("rrecv", rrecv(s, buf, sizeof buf, 0));
	printf("got %s\n", buf);
	struct sockaddr_in peer;
	socklen_t plen = sizeof peer;
	CHECK(rgetpeername(c, (struct sockaddr *)&peer, &plen) == 0);
	printf("peer port %d\n", ntohs(peer.sin_port) == atoi(argv[1]));
	SHOW("server rclose", rclose(s));
	SHOW("rrecv after peer rclose", rrecv(c, buf, sizeof buf, 0));
	SHOW("rsend after peer rclose", rsend(c, "x", 1, 0));
	SHOW("rclose", rclose(c));

	/* 2: half close, then non-blocking calls and rpoll. */
	pair(atoi(argv[1]), &c, &s);
	SHOW("client rshutdown(SHUT_WR)", rshutdown(c, SHUT_WR));
	SHOW("server rrecv", rrecv(s, buf, sizeof buf, 0));
	SHOW("server rsend back", rsend(s, "back", 4, 0));
	memset(buf, 0, sizeof buf);
	SHOW("client rrecv", rrecv(c, buf, sizeof buf, 0));
	printf("got %s\n", buf);
	SHOW("client rsend after SHUT_WR", rsend(c, "x", 1, 0));
	CHECK(rfcntl(c, F_SETFL, O_NONBLOCK) == 0);
	printf("F_GETFL has O_NONBLOCK: %d\n", !!(rfcntl(c, F_GETFL) & O_NONBLOCK));
	SHOW("non-blocking rrecv", rrecv(c, buf, sizeof buf, 0));
	int p[2];
	CHECK(pipe(p) == 0);
	struct pollfd fds[2] = { { .fd = c, .events = POLLIN }, { .fd = p[0], .events = POLLIN } };
	SHOW("rpoll, nothing ready", rpoll(fds, 2, 50));
	CHECK(write(p[1], "p", 1) == 1);
	SHOW("rpoll, the pipe", rpoll(fds, 2, 5000));
	printf("revents %d %d\n", fds[0].revents, fds[1].revents);
	SHOW("server rsend", rsend(s, "more", 4, 0));
	fds[1].fd = -1;
	SHOW("rpoll, the rsocket", rpoll(fds, 2, 5000));
	printf("revents %d\n", fds[0].revents);
	SHOW("rrecv", rrecv(c, buf, sizeof buf, 0));
	SHOW("rclose", rclose(c));
	SHOW("rclose", rclose(s));

	/* 3: descriptors that are no rsockets, a port nobody listens on. */
	SHOW("rsend on a pipe", rsend(p[1], "x", 1, 0));
	SHOW("rrecv on -1", rrecv(-1, buf, 1, 0));
	SHOW("rclose on a closed rsocket", rclose(c));
	SHOW("rsetsockopt on a pipe", rsetsockopt(p[0], SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
	struct sockaddr_in none = addr_of(atoi(argv[2]));
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	SHOW("rconnect to nobody", rconnect(c, (struct sockaddr *)&none, sizeof none));
	SHOW("rclose", rclose(c));
	SHOW("rclose listener", rclose(lfd));
	return 0;
}
