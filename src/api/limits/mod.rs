//! Protection against misbehaving clients. Each refusal is
//! RESOURCE_EXHAUSTED with an ErrorInfo reason; refusals that clear by
//! themselves (busy, too many watches) also carry a `google.rpc.RetryInfo`
//! with a back-off. Size refusals do not: the same request will never fit.
//!
//! Three places, from the outside in:
//!
//! - [`super::listener`]: open connections, and how long a connection may
//!   stay silent or idle.
//! - [`LimitLayer`], a tower layer around the whole gRPC server (behind
//!   the Connect and gRPC-Web layers, so their calls meet it as gRPC
//!   calls), before a request is decoded: metadata size; how long the request message may
//!   take to arrive after the headers (`--request-body-timeout`; also cut
//!   short at shutdown); open health `Watch` streams, which it ends at
//!   shutdown; and the rewriting of tonic's own refusals (message too
//!   large, undecodable message) into statuses with an ErrorInfo. It holds
//!   no permit for lease calls: a caller that has not been authenticated,
//!   or whose request has not arrived, holds nothing others need.
//! - [`CallLimits`], taken in the RPC wrapper after authentication,
//!   validation and authorization, with the request in hand: short calls
//!   per replica and per identity; waiting Acquires on a budget of their
//!   own; and a reserve through which Renew and Release get past a full
//!   short budget, so holders keep their leases while new work is shed.
//!   KeepAlive streams take a permit of their own budget for their
//!   lifetime, and each of their entries a renewal permit while it runs.
//!   [`WatchLimits`] counts the lease watch streams for their lifetime,
//!   and [`ReplyBudget`] the bytes of KeepAlive replies not yet taken by
//!   their clients.
//!
//! The last four have a file each: [`layer`], [`calls`], [`watches`] and
//! [`replies`].

mod calls;
mod layer;
mod replies;
mod watches;

pub use calls::{CallLimits, CallPermit, Class};
pub use layer::LimitLayer;
pub use replies::{ReplyBudget, Sent, StreamReplies};
pub use watches::WatchLimits;
