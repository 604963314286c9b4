//! No descriptor leaks across a vhost-user session: the one test of this
//! binary (so nothing else opens descriptors meanwhile) counts the
//! process's open descriptors before and after a session that sends
//! memory, eventfds, and descriptors where none belong.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::thread;

use sluice::vhost_user::message::{Body, MemoryRegion, Message, VringAddress};
use sluice::vhost_user::{Backend, BackendConfig, Frontend, VhostUserError, socket};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn memfd(len: u64) -> OwnedFd {
    // SAFETY: a NUL-terminated name; flags are plain bits.
    let fd = unsafe { libc::memfd_create(c"vhost-user-fds".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
    // SAFETY: `fd` was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a live descriptor and a plain length.
    let rc = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
    assert_eq!(rc, 0);
    fd
}

fn eventfd() -> OwnedFd {
    // SAFETY: plain flags.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: `fd` was just created and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[test]
fn a_whole_session_leaves_no_descriptor_open() {
    // Warm up what opens descriptors once (the thread machinery, /proc).
    thread::spawn(|| ()).join().unwrap();
    let before = open_fds();
    {
        let (front, back) = UnixStream::pair().unwrap();
        let serving = thread::spawn(move || {
            let mut backend = Backend::new(BackendConfig {
                features: 0,
                protocol_features: 0,
                queue_pairs: 1,
            });
            let mut refused = 0;
            // Bounded: the frontend sends a fixed number of messages.
            for _ in 0..64 {
                match backend.serve_one(&back, &mut ()) {
                    Ok(_) => {}
                    Err(VhostUserError::Closed) => return refused,
                    Err(_) => refused += 1,
                }
            }
            panic!("more messages than the frontend sent");
        });
        let driver = Frontend::from_stream(front.try_clone().unwrap());
        let mem = [memfd(0x10000), memfd(0x10000)];
        let regions = [
            (
                MemoryRegion {
                    guest_phys_addr: 0,
                    memory_size: 0x10000,
                    userspace_addr: 0x1000_0000,
                    mmap_offset: 0,
                },
                mem[0].as_fd(),
            ),
            (
                MemoryRegion {
                    guest_phys_addr: 0x10000,
                    memory_size: 0x10000,
                    userspace_addr: 0x2000_0000,
                    mmap_offset: 0,
                },
                mem[1].as_fd(),
            ),
        ];
        // Twice: the second table replaces (unmaps) the first.
        driver.set_mem_table(&regions).unwrap();
        driver.set_mem_table(&regions).unwrap();
        let (kick, call, err) = (eventfd(), eventfd(), eventfd());
        driver.set_vring_num(0, 64).unwrap();
        driver
            .set_vring_addr(&VringAddress {
                index: 0,
                flags: 0,
                desc_user_addr: 0x1000_0000,
                avail_user_addr: 0x1000_1000,
                used_user_addr: 0x1000_2000,
                log_guest_addr: 0,
            })
            .unwrap();
        driver.set_vring_call(0, Some(call.as_fd())).unwrap();
        driver.set_vring_err(0, Some(err.as_fd())).unwrap();
        driver.set_vring_kick(0, Some(kick.as_fd())).unwrap();
        // Kicked again: the first kick eventfd is closed.
        driver.set_vring_kick(0, Some(kick.as_fd())).unwrap();
        assert_eq!(driver.get_vring_base(0).unwrap(), 0);
        // Descriptors where none belong, and too few for a table.
        let owner = Message::new(Body::SetOwner).encode();
        socket::send(&front, &owner, &[kick.as_fd(), call.as_fd()]).unwrap();
        let bad_table = Message::new(Body::SetMemTable(Default::default())).encode();
        socket::send(&front, &bad_table, &[mem[0].as_fd()]).unwrap();
        drop(driver);
        drop(front);
        assert_eq!(serving.join().unwrap(), 2);
    }
    assert_eq!(open_fds(), before);
}
