//! Time as the engine sees it: nanoseconds from the host's clock, given with each call or read
//! lazily through the host's clock the first time a call needs it.

/// Virtual or monotonic time in nanoseconds; the engine never reads a clock itself.
pub type Nanos = u64;

/// The time of one call into the engine: given by the caller ([`Now::At`]), or read from the
/// caller's clock the first time the engine needs it and then the same for the rest of the call
/// ([`Now::Lazy`]). The engine needs the time only to arm a timer, so a real-time host that
/// hands over its clock reads it for no call that arms none: a received SEND, an ACK that
/// retires everything in flight. The engine itself still reads no clock.
pub enum Now<'c> {
    /// This time.
    At(Nanos),
    /// What this clock says when first asked.
    Lazy(&'c mut dyn FnMut() -> Nanos),
}

impl Now<'_> {
    /// The time of the call: the clock is read the first time only.
    pub fn get(&mut self) -> Nanos {
        match self {
            Now::At(t) => *t,
            Now::Lazy(clock) => {
                let t = clock();
                *self = Now::At(t);
                t
            }
        }
    }

    /// The deadline of a local ACK timer of `timeout` ns armed now: `now + timeout` if the time
    /// is known, else [`UNSTAMPED`], which the host turns into a deadline at its next look at
    /// the clock ([`Nic::stamp_timers`](super::Nic::stamp_timers)). The timeout is the least time the requester waits
    /// (IBA 9.7.6.1.3 lets it wait longer), so starting it a little late is within the rules,
    /// and a post, which arms the timer for every message sent into an idle QP, reads no clock.
    pub(crate) fn ack_deadline(&self, timeout: Nanos) -> Nanos {
        match self {
            Now::At(t) => t + timeout,
            Now::Lazy(_) => UNSTAMPED,
        }
    }
}

/// The deadline of a local ACK timer armed while the time was not read ([`Now::ack_deadline`]):
/// earlier than any real deadline (each is at least a timeout after the clock's start), so the
/// timer index files these first and the host's next timer check finds them.
pub(crate) const UNSTAMPED: Nanos = 0;
