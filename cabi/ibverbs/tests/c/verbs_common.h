/* verbs_common.h: what the one-process C tests of cabi/ibverbs share. connect_rc(qp, dest, gid,
 * access): INIT (port 1, the given remote access), RTR towards QP `dest` at `gid` (path MTU
 * 1024, GID index 1, one READ/atomic in hand), then RTS (timeout 14, retry_cnt and rnr_retry 7);
 * a step that fails exits with 2, 3 or 4. */
#ifndef VERBS_COMMON_H
#define VERBS_COMMON_H

#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static inline void connect_rc(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid, int access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = access };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		exit(2);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12; a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid; a.ah_attr.grh.sgid_index = 1; a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		exit(3);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		exit(4);
}

#endif
