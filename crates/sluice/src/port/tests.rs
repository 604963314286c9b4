//! Port life cycle with a scripted driver: what is started and stopped, in
//! which order, and what a failure undoes.

use std::sync::{Arc, Mutex};

use super::*;
use crate::mbuf::BurstSlice;
use crate::net::MacAddr;

type Log = Arc<Mutex<Vec<String>>>;

struct ScriptedQueue {
    name: String,
    log: Log,
    fail_start: bool,
}

impl ScriptedQueue {
    fn note(&self, what: &str) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{what} {}", self.name));
    }
}

impl RxQueue for ScriptedQueue {
    fn rx_burst(&mut self, _: &mut BurstSlice) -> usize {
        0
    }
    fn start(&mut self) -> Result<(), PortError> {
        self.note("start");
        if self.fail_start {
            return Err(PortError::Driver(format!("{} would not start", self.name)));
        }
        Ok(())
    }
    fn stop(&mut self) {
        self.note("stop");
    }
}

impl TxQueue for ScriptedQueue {
    fn tx_burst(&mut self, _: &mut BurstSlice) -> usize {
        0
    }
    fn start(&mut self) -> Result<(), PortError> {
        RxQueue::start(self)
    }
    fn stop(&mut self) {
        RxQueue::stop(self)
    }
}

struct Scripted {
    info: DeviceInfo,
    log: Log,
    fail: Option<&'static str>,
}

impl PortDriver for Scripted {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn setup(&mut self, c: &PortConfig, _: &Arc<PortCounters>) -> Result<Queues, PortError> {
        let q = |name: String| ScriptedQueue {
            fail_start: self.fail == Some(name.as_str()),
            name,
            log: Arc::clone(&self.log),
        };
        Ok(Queues {
            rx: (0..c.rxq.len())
                .map(|i| Box::new(q(format!("rx{i}"))) as Box<dyn RxQueue>)
                .collect(),
            tx: (0..c.txq.len())
                .map(|i| Box::new(q(format!("tx{i}"))) as Box<dyn TxQueue>)
                .collect(),
        })
    }
    fn start(&mut self) -> Result<(), PortError> {
        self.log.lock().unwrap().push("start device".into());
        if self.fail == Some("device") {
            return Err(PortError::Driver("device would not start".into()));
        }
        Ok(())
    }
    fn stop(&mut self) {
        self.log.lock().unwrap().push("stop device".into());
    }
}

fn port(fail: Option<&'static str>) -> (Port, Log) {
    let log: Log = Arc::default();
    let driver = Scripted {
        info: DeviceInfo {
            driver: "scripted",
            max_rx_queues: 4,
            max_tx_queues: 4,
            nb_rxd: (64, 4096),
            nb_txd: (64, 4096),
            desc_pow2: true,
            max_mtu: 9000,
            rx_offload_capa: Offloads::RSS_HASH,
            tx_offload_capa: Offloads::FAST_FREE,
            needs_rx_pool: false,
            mac: MacAddr([2, 0, 0, 0, 0, 9]),
        },
        log: Arc::clone(&log),
        fail,
    };
    let config = PortConfig::new(None).queues(2, 2);
    (
        Port::new("scripted", Box::new(driver), config).unwrap(),
        log,
    )
}

fn take(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

#[test]
fn start_starts_queues_then_device_and_stop_reverses() {
    let (mut p, log) = port(None);
    assert_eq!(p.mac(), MacAddr([2, 0, 0, 0, 0, 9]));
    p.start().unwrap();
    assert_eq!(
        take(&log),
        [
            "start rx0",
            "start rx1",
            "start tx0",
            "start tx1",
            "start device"
        ]
    );
    assert!(matches!(p.start(), Err(PortError::Started)));
    p.stop();
    assert_eq!(
        take(&log),
        [
            "stop device",
            "stop rx0",
            "stop rx1",
            "stop tx0",
            "stop tx1"
        ]
    );
    p.stop();
    assert!(
        take(&log).is_empty(),
        "stopping a stopped port does nothing"
    );
    assert!(matches!(p.rx_queue(0), Err(PortError::Stopped)));
}

#[test]
fn a_failed_start_stops_what_had_started() {
    let (mut p, log) = port(Some("tx1"));
    assert_eq!(p.start().unwrap_err().to_string(), "tx1 would not start");
    assert_eq!(
        take(&log),
        [
            "start rx0",
            "start rx1",
            "start tx0",
            "start tx1",
            "stop rx0",
            "stop rx1",
            "stop tx0"
        ]
    );
    assert!(!p.is_started());
    let (mut p, log) = port(Some("device"));
    assert!(p.start().is_err());
    let l = take(&log);
    assert_eq!(l.len(), 5 + 4, "every queue stopped again: {l:?}");
    drop(p);
    assert!(take(&log).is_empty(), "nothing to stop on drop");
}

#[test]
fn drop_stops_a_started_port_and_queues_are_numbered() {
    let (mut p, log) = port(None);
    p.start().unwrap();
    take(&log);
    assert_eq!(
        p.tx_queue(2).err().unwrap().to_string(),
        "no Tx queue 2: the port has 2"
    );
    let (rx, tx) = p.queues_mut().unwrap();
    assert_eq!((rx.len(), tx.len()), (2, 2));
    drop(p);
    assert_eq!(take(&log)[0], "stop device");
}

#[test]
fn config_is_checked_against_the_device() {
    let check = |f: &dyn Fn(&mut PortConfig)| {
        let mut c = PortConfig::new(None).queues(2, 2);
        f(&mut c);
        let driver = Scripted {
            info: port(None).0.info().clone(),
            log: Arc::default(),
            fail: None,
        };
        Port::new("s", Box::new(driver), c).unwrap_err().to_string()
    };
    assert_eq!(
        check(&|c| c.rxq[1].nb_rxd = 100),
        "port 's': Rx queue 1: 100 Rx descriptors: driver scripted takes only powers of two"
    );
    assert_eq!(
        check(&|c| c.txq[0].nb_txd = 8192),
        "port 's': Tx queue 0: 8192 Tx descriptors: driver scripted takes 64 to 4096"
    );
    assert_eq!(
        check(&|c| *c = c.clone().queues(2, 5)),
        "port 's': 5 Tx queues asked, driver scripted has at most 4"
    );
    assert_eq!(
        check(&|c| c.rx_offloads |= Offloads::CHECKSUMS),
        "port 's': driver scripted has no Rx offload ipv4_cksum,udp_cksum,tcp_cksum"
    );
    assert_eq!(
        check(&|c| c.mtu = 40),
        "port 's': MTU 40: driver scripted takes 68 to 9000"
    );
}

#[test]
fn offload_names_round_trip() {
    for name in Offloads::all_names() {
        let o = Offloads::from_name(name).unwrap();
        assert_eq!(o.names(), [*name]);
    }
    assert_eq!(Offloads::from_name("bogus"), None);
    assert_eq!(Offloads::NONE.to_string(), "none");
    assert_eq!(
        (Offloads::TSO | Offloads::FAST_FREE).to_string(),
        "fast_free,tso"
    );
}
