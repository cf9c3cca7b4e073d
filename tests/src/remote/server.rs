//! The child's side of the verbs pipe ([`serve`]): a table of the objects the test created, by
//! handle, and each request line run as the verb it names on the child's own device.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use verbs_api::*;

use super::codec::{
    decode, escape, malformed, put_cap, put_device_attr, put_event, put_port_attr, put_qp_attr,
    put_srq_attr, put_wc, take_ah, take_cap, take_qp_attr, take_recv_wrs, take_send_wr,
    take_srq_attr, Line, OwnedSendWr, Tokens,
};
use super::BLOCKING_CAP;

/// An object the child holds for the test, by handle.
enum Obj {
    Pd(ProtectionDomain),
    Mr(MemoryRegion),
    Cq(CompletionQueue),
    Channel(CompChannel),
    Qp(QueuePair),
    Srq(SharedReceiveQueue),
    Ah(AddressHandle),
}

/// The child's table of objects.
struct Server {
    ctx: Context,
    objs: BTreeMap<u64, Obj>,
    next: u64,
}

macro_rules! getter {
    ($name:ident, $variant:ident, $ty:ty, $what:literal) => {
        fn $name(&self, t: &mut Tokens<'_>) -> Result<&$ty> {
            let h: u64 = t.num(concat!($what, " handle"))?;
            match self.objs.get(&h) {
                Some(Obj::$variant(x)) => Ok(x),
                _ => Err(malformed(format!("no {} with handle {h}", $what))),
            }
        }
    };
}

impl Server {
    getter!(pd, Pd, ProtectionDomain, "PD");
    getter!(mr, Mr, MemoryRegion, "MR");
    getter!(cq, Cq, CompletionQueue, "CQ");
    getter!(channel, Channel, CompChannel, "completion channel");
    getter!(qp, Qp, QueuePair, "QP");
    getter!(srq, Srq, SharedReceiveQueue, "SRQ");

    fn add(&mut self, o: Obj) -> u64 {
        let h = self.next;
        self.next += 1;
        self.objs.insert(h, o);
        h
    }

    /// Handle 0 is "none"; any other must name a CQ.
    fn opt_cq(&self, h: u64) -> Result<Option<&CompletionQueue>> {
        match (h, self.objs.get(&h)) {
            (0, _) => Ok(None),
            (_, Some(Obj::Cq(c))) => Ok(Some(c)),
            _ => Err(malformed(format!("no CQ with handle {h}"))),
        }
    }

    fn recv_wrs<'a>(owned: &'a [(u64, Vec<Sge>)]) -> Vec<RecvWr<'a>> {
        owned.iter().map(|(wr_id, sges)| RecvWr { wr_id: *wr_id, sg_list: sges }).collect()
    }

    /// Runs one request; the reply's fields go into `out` (after `OK`).
    fn handle(&mut self, verb: &str, t: &mut Tokens<'_>, out: &mut Line) -> Result<()> {
        match verb {
            "drop" => {
                let h: u64 = t.num("handle")?;
                self.objs.remove(&h);
            }
            "query_device" => put_device_attr(out, &self.ctx.query_device()?),
            "query_port" => put_port_attr(out, &self.ctx.query_port(t.num("port_num")?)?),
            "query_gid" => {
                let gid = self.ctx.query_gid(t.num("port_num")?, t.num("index")?)?;
                out.bytes(&gid.0);
            }
            "alloc_pd" => {
                let pd = self.ctx.alloc_pd()?;
                out.num(self.add(Obj::Pd(pd)));
            }
            "create_comp_channel" => {
                let ch = self.ctx.create_comp_channel()?;
                out.num(self.add(Obj::Channel(ch)));
            }
            "create_cq" => {
                let cqe = t.num("cqe")?;
                let ch: u64 = t.num("channel handle")?;
                let vector = t.num("comp_vector")?;
                let channel = match (ch, self.objs.get(&ch)) {
                    (0, _) => None,
                    (_, Some(Obj::Channel(c))) => Some(c.clone()),
                    _ => return Err(malformed(format!("no completion channel with handle {ch}"))),
                };
                let cq = self.ctx.create_cq(cqe, channel.as_ref(), vector)?;
                let (cqe, id) = (cq.cqe(), cq.ops().id());
                out.num(self.add(Obj::Cq(cq))).num(cqe).num(id);
            }
            "get_async_event" => {
                let timeout = t.opt_duration("timeout")?.unwrap_or(BLOCKING_CAP);
                put_event(out, &self.ctx.get_async_event(Some(timeout))?);
            }
            "reg_mr" => {
                let pd = self.pd(t)?;
                let len = t.num("len")?;
                let access = AccessFlags::from_bits(t.num("access")?)
                    .ok_or_else(|| malformed("unknown access flag bits".into()))?;
                let mr = pd.reg_mr(len, access)?;
                let (lkey, rkey, addr, len) = (mr.lkey(), mr.rkey(), mr.addr(), mr.len());
                out.num(self.add(Obj::Mr(mr))).num(lkey).num(rkey).num(addr).num(len as u64);
            }
            "create_qp" => {
                let pd = self.pd(t)?.clone();
                let qp_type = decode::<QpType>(t, "qp_type")?;
                let send_cq = self.opt_cq(t.num("send_cq")?)?.cloned();
                let recv_cq = self.opt_cq(t.num("recv_cq")?)?.cloned();
                let srq_h: u64 = t.num("srq")?;
                let srq = match (srq_h, self.objs.get(&srq_h)) {
                    (0, _) => None,
                    (_, Some(Obj::Srq(s))) => Some(s.clone()),
                    _ => return Err(malformed(format!("no SRQ with handle {srq_h}"))),
                };
                let cap = take_cap(t)?;
                let sq_sig_all = t.flag("sq_sig_all")?;
                let (Some(send_cq), Some(recv_cq)) = (send_cq, recv_cq) else {
                    return Err(malformed("create_qp without both CQs".into()));
                };
                let qp =
                    pd.create_qp(&QpInitAttr { qp_type, send_cq, recv_cq, srq, cap, sq_sig_all })?;
                let qpn = qp.qp_num();
                out.num(self.add(Obj::Qp(qp))).num(qpn);
            }
            "create_srq" => {
                let pd = self.pd(t)?;
                let init = SrqInitAttr {
                    max_wr: t.num("max_wr")?,
                    max_sge: t.num("max_sge")?,
                    srq_limit: t.num("srq_limit")?,
                };
                let srq = pd.create_srq(&init)?;
                let id = srq.id();
                out.num(self.add(Obj::Srq(srq))).num(id);
            }
            "create_ah" => {
                let pd = self.pd(t)?;
                let ah = pd.create_ah(&take_ah(t)?)?;
                out.num(self.add(Obj::Ah(ah)));
            }
            "dealloc_pd" => self.pd(t)?.ops().dealloc()?,
            "mr_read" => {
                let mr = self.mr(t)?;
                let (off, len): (usize, usize) = (t.num("offset")?, t.num("len")?);
                if len > mr.len() {
                    return Err(Error::inval(format!(
                        "reading {len} bytes from an MR of {} bytes",
                        mr.len()
                    )));
                }
                out.bytes(&mr.read_vec(off, len)?);
            }
            "mr_write" => {
                let mr = self.mr(t)?;
                let off = t.num("offset")?;
                mr.write(off, &t.bytes("data")?)?;
            }
            "dereg_mr" => self.mr(t)?.ops().dereg()?,
            "poll_cq" => {
                let cq = self.cq(t)?;
                let n: usize = t.num("count")?;
                let mut wc = vec![WorkCompletion::default(); n.min(4096)];
                let got = cq.poll(&mut wc)?;
                out.num(got as u64);
                for w in &wc[..got] {
                    put_wc(out, w);
                }
            }
            "req_notify_cq" => {
                let cq = self.cq(t)?;
                cq.req_notify(t.flag("solicited_only")?)?;
            }
            "resize_cq" => {
                let cq = self.cq(t)?;
                cq.resize(t.num("cqe")?)?;
                out.num(cq.cqe());
            }
            "destroy_cq" => self.cq(t)?.ops().destroy()?,
            "get_cq_event" => {
                let ch = self.channel(t)?;
                let timeout = t.opt_duration("timeout")?.unwrap_or(BLOCKING_CAP);
                let cq = ch.get_cq_event(Some(timeout))?;
                let h = self.objs.iter().find_map(|(h, o)| match o {
                    Obj::Cq(c) if *c == cq => Some(*h),
                    _ => None,
                });
                let h = h.ok_or_else(|| {
                    Error::new(Errno::Io, "ibv_get_cq_event: the event names a CQ the test dropped")
                })?;
                out.num(h);
            }
            "ack_cq_events" => {
                let ch = self.channel(t)?;
                let cq = self.cq(t)?;
                ch.ack_cq_events(cq, t.num("nevents")?);
            }
            "post_send" => {
                let qp = self.qp(t)?;
                let n: usize = t.num("number of WRs")?;
                let owned = (0..n.min(1 << 16))
                    .map(|_| take_send_wr(t))
                    .collect::<Result<Vec<OwnedSendWr>>>()?;
                let mut wrs = Vec::with_capacity(owned.len());
                for o in &owned {
                    let (ah_h, remote_qpn, remote_qkey) = o.ud;
                    let ud = match (ah_h, self.objs.get(&ah_h)) {
                        (0, _) => None,
                        (_, Some(Obj::Ah(ah))) => {
                            Some(UdTarget { ah: ah.clone(), remote_qpn, remote_qkey })
                        }
                        _ => return Err(malformed(format!("no AH with handle {ah_h}"))),
                    };
                    wrs.push(SendWr {
                        wr_id: o.wr_id,
                        sg_list: &o.sges,
                        opcode: o.opcode,
                        send_flags: o.send_flags,
                        imm_data: o.imm_data,
                        rdma: o.rdma,
                        atomic: o.atomic,
                        ud,
                        inline_data: o.inline.as_deref(),
                        ..SendWr::default()
                    });
                }
                qp.post_send(&wrs)?;
            }
            "post_recv" => {
                let qp = self.qp(t)?;
                let owned = take_recv_wrs(t)?;
                qp.post_recv(&Server::recv_wrs(&owned))?;
            }
            "modify_qp" => {
                let qp = self.qp(t)?;
                let attr = take_qp_attr(t)?;
                let mask = QpAttrMask::from_bits(t.num("mask")?)
                    .ok_or_else(|| malformed("unknown attribute mask bits".into()))?;
                qp.modify(&attr, mask)?;
            }
            "query_qp" => {
                let (a, c) = self.qp(t)?.query()?;
                put_qp_attr(out, &a);
                put_cap(out, &c);
            }
            "destroy_qp" => self.qp(t)?.ops().destroy()?,
            "post_srq_recv" => {
                let srq = self.srq(t)?;
                let owned = take_recv_wrs(t)?;
                srq.post_recv(&Server::recv_wrs(&owned))?;
            }
            "modify_srq" => {
                let srq = self.srq(t)?;
                let attr = take_srq_attr(t)?;
                let mask = SrqAttrMask::from_bits(t.num("mask")?)
                    .ok_or_else(|| malformed("unknown SRQ attribute mask bits".into()))?;
                srq.modify(&attr, mask)?;
            }
            "query_srq" => put_srq_attr(out, &self.srq(t)?.query()?),
            "destroy_srq" => self.srq(t)?.ops().destroy()?,
            other => return Err(malformed(format!("unknown verb {other:?}"))),
        }
        Ok(())
    }

    /// Drops every object, users before what they use, so the backend can free each one.
    fn drop_all(&mut self) {
        let rank = |o: &Obj| match o {
            Obj::Qp(_) => 0,
            Obj::Srq(_) | Obj::Ah(_) => 1,
            Obj::Mr(_) => 2,
            Obj::Cq(_) => 3,
            Obj::Channel(_) => 4,
            Obj::Pd(_) => 5,
        };
        for r in 0..=5 {
            self.objs.retain(|_, o| rank(o) != r);
        }
    }
}

/// The child's side: says `VERBS <device>`, then runs each request line from `input` on `ctx`
/// and writes its reply to `output`, until `BYE` (Ok, after dropping every object) or the end
/// of `input` (an error: the test is gone).
pub fn serve(
    ctx: &Context,
    input: &mut dyn BufRead,
    output: &mut dyn Write,
) -> std::result::Result<(), String> {
    let mut say = |line: &str| -> std::result::Result<(), String> {
        writeln!(output, "{line}")
            .and_then(|()| output.flush())
            .map_err(|e| format!("writing a reply: {e}"))
    };
    say(&format!("VERBS {}", ctx.device_name()))?;
    let mut s = Server { ctx: ctx.clone(), objs: BTreeMap::new(), next: 1 };
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => return Err("stdin closed: the test process is gone".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("reading a request: {e}")),
        }
        let request = line.trim_end();
        if request == "BYE" {
            s.drop_all();
            return say("OK");
        }
        let mut t = Tokens::new(request);
        let mut out = Line::new("OK");
        let result = t.word("verb").and_then(|verb| s.handle(verb, &mut t, &mut out));
        let result = result.and_then(|()| t.end());
        match result {
            Ok(()) => say(&out.0)?,
            Err(e) => say(&format!("ERR {} {}", e.errno.code(), escape(&e.message)))?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_answers_each_line_and_names_what_it_cannot_run() {
        let soft = nic_model::soft::Soft::loopback();
        let ctx = soft.open("softverbs0").unwrap();
        let input = "alloc_pd\nreg_mr 1 64 1\nmr_write 2 0 abcd\nmr_read 2 0 2\nbogus 7\n\
                     reg_mr 99 64 1\nmr_read 2 0\nquery_port 2\nBYE\nalloc_pd\n";
        let mut out = Vec::new();
        serve(&ctx, &mut input.as_bytes(), &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "VERBS softverbs0");
        assert_eq!(lines[1], "OK 1");
        assert!(lines[2].starts_with("OK 2 "), "{}", lines[2]);
        assert_eq!(lines[3..5], ["OK", "OK abcd"]);
        assert_eq!(lines[5], "ERR 5 verbs pipe: unknown verb \"bogus\"");
        assert_eq!(lines[6], "ERR 5 verbs pipe: no PD with handle 99");
        assert_eq!(lines[7], "ERR 5 verbs pipe: len missing in \"mr_read 2 0\"");
        assert!(
            lines[8].starts_with("ERR 22 ibv_query_port: port 2 does not exist"),
            "{}",
            lines[8]
        );
        assert_eq!(lines[9..], ["OK"], "nothing is served after BYE");
        let e = serve(&ctx, &mut "alloc_pd\n".as_bytes(), &mut Vec::new()).unwrap_err();
        assert!(e.contains("stdin closed"), "{e}");
    }
}
