//! [`Error`]: every error the library returns, in one type.
//!
//! Each module has its own error enum, precise enough to match on
//! ([`PortError`], [`MbufError`], [`RingError`], ...). An application that
//! only reports errors can use [`Result`] instead and let `?` convert any of
//! them into an [`Error`]; matching stays possible through the variant
//! ([`Error::Port`], ...) or [`std::error::Error::source`].

use std::fmt;
use std::io;

use crate::distributor::DistError;
#[cfg(not(loom))]
use crate::driver::pcap::format::PcapError;
use crate::lcore::LcoreError;
use crate::mbuf::MbufError;
#[cfg(not(loom))]
use crate::memif::MemifError;
use crate::mempool::MempoolError;
use crate::net::NetError;
use crate::net::em::EmError;
use crate::net::lpm::LpmError;
use crate::net::lpm::routegen::RouteGenError;
use crate::net::routes::RoutesError;
use crate::pagepool::PagePoolError;
use crate::port::{PortError, SpecError};
use crate::ring::RingError;
use crate::tester::TesterError;
use crate::vhost_user::VhostUserError;
use crate::virtio::VirtioError;

/// Any error of the library: one variant per module error, wrapping it.
///
/// `Display` is the module error's own message (each names what it is
/// about: the ring, the pool, the port spec, ...); `source()` is the module
/// error itself. `From` converts every module error, and [`io::Error`] (from
/// the few public calls that return one, such as
/// [`mempool::Region::new`](crate::mempool::Region::new) and
/// [`signal::on_interrupt`](crate::signal::on_interrupt)), so `?` works on
/// any of them in a function returning [`Result`].
///
/// # Example
///
/// Two module errors, one function:
///
/// ```
/// use sluice::mbuf::{MbufPool, MbufPoolConfig};
/// use sluice::port::{Port, PortConfig, PortError};
///
/// fn pool_and_port(spec: &str) -> sluice::Result<(MbufPool, Port)> {
///     let pool = MbufPool::new(MbufPoolConfig {
///         size: 1023,
///         ..Default::default()
///     })?; // an MbufError
///     let port = sluice::driver::open(spec, PortConfig::new(Some(pool.clone())))?; // a PortError
///     Ok((pool, port))
/// }
///
/// let (pool, port) = pool_and_port("null")?;
/// drop(port);
/// assert!(pool.is_full());
///
/// let err = pool_and_port("nosuch").unwrap_err();
/// assert!(matches!(err, sluice::Error::Port(PortError::Spec(_))));
/// assert!(err.to_string().contains("unknown driver 'nosuch'"));
/// # Ok::<(), sluice::Error>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A ring could not be created.
    Ring(RingError),
    /// A mempool could not be built, or a get failed.
    Mempool(MempoolError),
    /// An mbuf, mbuf pool or burst operation failed.
    Mbuf(MbufError),
    /// A page pool, block provider or fragment operation failed.
    PagePool(PagePoolError),
    /// A port could not be opened, started or used.
    Port(PortError),
    /// A port spec string was rejected.
    Spec(SpecError),
    /// A pcap file could not be read or written.
    #[cfg(not(loom))]
    Pcap(PcapError),
    /// An lcore could not be registered, pinned or launched.
    Lcore(LcoreError),
    /// A distributor call was refused.
    Distributor(DistError),
    /// A buffer is not a valid header of the kind asked for.
    Net(NetError),
    /// An LPM table operation failed.
    Lpm(LpmError),
    /// An exact-match table operation failed.
    Em(EmError),
    /// A routes file could not be read.
    Routes(RoutesError),
    /// A generated route set could not be made.
    RouteGen(RouteGenError),
    /// Guest memory or a virtqueue refused an operation.
    Virtio(VirtioError),
    /// A vhost-user message, request or reply was refused.
    VhostUser(VhostUserError),
    /// A memif message, handshake, region or ring was refused.
    #[cfg(not(loom))]
    Memif(MemifError),
    /// The tester refused a call.
    Tester(TesterError),
    /// A system call failed.
    Io(io::Error),
}

impl Error {
    /// The wrapped module error.
    fn inner(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Error::Ring(e) => e,
            Error::Mempool(e) => e,
            Error::Mbuf(e) => e,
            Error::PagePool(e) => e,
            Error::Port(e) => e,
            Error::Spec(e) => e,
            #[cfg(not(loom))]
            Error::Pcap(e) => e,
            Error::Lcore(e) => e,
            Error::Distributor(e) => e,
            Error::Net(e) => e,
            Error::Lpm(e) => e,
            Error::Em(e) => e,
            Error::Routes(e) => e,
            Error::RouteGen(e) => e,
            Error::Virtio(e) => e,
            Error::VhostUser(e) => e,
            #[cfg(not(loom))]
            Error::Memif(e) => e,
            Error::Tester(e) => e,
            Error::Io(e) => e,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.inner(), f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.inner())
    }
}

/// `From<$error> for Error`, into the variant `$variant`.
macro_rules! from_module_error {
    ($($(#[$attr:meta])* $error:ty => $variant:ident,)*) => {
        $(
            $(#[$attr])*
            impl From<$error> for Error {
                fn from(e: $error) -> Error {
                    Error::$variant(e)
                }
            }
        )*
    };
}

from_module_error! {
    RingError => Ring,
    MempoolError => Mempool,
    MbufError => Mbuf,
    PagePoolError => PagePool,
    PortError => Port,
    SpecError => Spec,
    #[cfg(not(loom))]
    PcapError => Pcap,
    LcoreError => Lcore,
    DistError => Distributor,
    NetError => Net,
    LpmError => Lpm,
    EmError => Em,
    RoutesError => Routes,
    RouteGenError => RouteGen,
    VirtioError => Virtio,
    VhostUserError => VhostUser,
    #[cfg(not(loom))]
    MemifError => Memif,
    TesterError => Tester,
    io::Error => Io,
}

/// A result whose error is, unless said otherwise, [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(all(test, not(loom)))]
mod tests {
    use std::error::Error as _;
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    /// `e` converted into an [`Error`]: the variant `check` accepts, the
    /// same message, and `source()` is `e` itself (same message, same type).
    fn converts<E>(e: E, check: fn(&Error) -> bool)
    where
        E: std::error::Error + 'static,
        Error: From<E>,
    {
        let text = e.to_string();
        let err = Error::from(e);
        assert!(check(&err), "wrong variant: {err:?}");
        assert_eq!(err.to_string(), text);
        let source = err.source().expect("a source");
        assert!(source.is::<E>(), "source is not the module error");
        assert_eq!(source.to_string(), text);
    }

    #[test]
    fn every_module_error_converts_with_its_message() {
        converts(RingError::NotPowerOfTwo(3), |e| {
            matches!(e, Error::Ring(RingError::NotPowerOfTwo(3)))
        });
        converts(MempoolError::ZeroSize, |e| {
            matches!(e, Error::Mempool(MempoolError::ZeroSize))
        });
        converts(MbufError::TooManyRefs, |e| {
            matches!(e, Error::Mbuf(MbufError::TooManyRefs))
        });
        converts(PagePoolError::BadOrder(12), |e| {
            matches!(e, Error::PagePool(PagePoolError::BadOrder(12)))
        });
        converts(PortError::Started, |e| {
            matches!(e, Error::Port(PortError::Started))
        });
        converts(SpecError::Empty, |e| {
            matches!(e, Error::Spec(SpecError::Empty))
        });
        converts(PcapError::BadMagic { found: 7 }, |e| {
            matches!(e, Error::Pcap(PcapError::BadMagic { found: 7 }))
        });
        converts(LcoreError::Exhausted, |e| {
            matches!(e, Error::Lcore(LcoreError::Exhausted))
        });
        converts(DistError::NoWorkers, |e| {
            matches!(e, Error::Distributor(DistError::NoWorkers))
        });
        converts(
            NetError::Truncated {
                header: "ipv4",
                need: 20,
                have: 3,
            },
            |e| matches!(e, Error::Net(NetError::Truncated { have: 3, .. })),
        );
        converts(
            LpmError::NotFound {
                prefix: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)),
                depth: 8,
            },
            |e| matches!(e, Error::Lpm(LpmError::NotFound { depth: 8, .. })),
        );
        converts(EmError::Full { max_entries: 4 }, |e| {
            matches!(e, Error::Em(EmError::Full { max_entries: 4 }))
        });
        converts(RoutesError::TooManyLines, |e| {
            matches!(e, Error::Routes(RoutesError::TooManyLines))
        });
        converts(RouteGenError::NoNextHops, |e| {
            matches!(e, Error::RouteGen(RouteGenError::NoNextHops))
        });
        converts(VirtioError::BadQueueSize(3), |e| {
            matches!(e, Error::Virtio(VirtioError::BadQueueSize(3)))
        });
        converts(VhostUserError::TooManyFds, |e| {
            matches!(e, Error::VhostUser(VhostUserError::TooManyFds))
        });
        converts(MemifError::BadCookie(1), |e| {
            matches!(e, Error::Memif(MemifError::BadCookie(1)))
        });
        converts(crate::tester::TesterError::TooManyStreams, |e| {
            matches!(e, Error::Tester(TesterError::TooManyStreams))
        });
        converts(
            io::Error::from_raw_os_error(libc::EPERM),
            |e| matches!(e, Error::Io(io) if io.raw_os_error() == Some(libc::EPERM)),
        );
    }

    #[test]
    fn display_is_the_module_message() {
        let err = Error::from(RingError::NotPowerOfTwo(3));
        assert_eq!(err.to_string(), "ring capacity 3 is not a power of two");
        let err = Error::from(SpecError::Empty);
        assert_eq!(
            err.to_string(),
            "empty port spec: expected driver[:key=value,...]"
        );
    }

    #[test]
    fn source_chain_reaches_the_innermost_error() {
        // Error -> PortError -> SpecError, then the end of the chain.
        let err = Error::from(PortError::from(SpecError::Empty));
        let port = err.source().expect("the port error");
        assert!(port.is::<PortError>());
        let spec = port.source().expect("the spec error");
        assert!(spec.is::<SpecError>());
        assert!(spec.source().is_none());

        // Error -> MempoolError -> io::Error.
        let io = io::Error::from_raw_os_error(libc::ENOMEM);
        let err = Error::from(MempoolError::Memory(io));
        let chain: Vec<String> =
            std::iter::successors(Some(&err as &dyn std::error::Error), |e| (*e).source())
                .map(|e| e.to_string())
                .collect();
        let os = io::Error::from_raw_os_error(libc::ENOMEM).to_string();
        assert_eq!(
            chain,
            [
                format!("mempool memory: {os}"),
                format!("mempool memory: {os}"),
                os
            ]
        );
    }

    #[test]
    fn question_mark_converts_two_module_errors_in_one_function() {
        fn ring_then_lpm(capacity: usize, max_routes: u32) -> Result<()> {
            crate::ring::Ring::<u32>::spsc(capacity)?;
            crate::net::lpm::Lpm4::new(crate::net::lpm::LpmConfig {
                max_routes,
                number_tbl8s: 16,
            })?;
            Ok(())
        }
        assert!(matches!(
            ring_then_lpm(3, 16),
            Err(Error::Ring(RingError::NotPowerOfTwo(3)))
        ));
        assert!(matches!(
            ring_then_lpm(4, 0),
            Err(Error::Lpm(LpmError::ZeroMaxRoutes))
        ));
        assert!(ring_then_lpm(4, 16).is_ok());
    }
}
