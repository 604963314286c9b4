use std::collections::HashSet;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::routes::*;

fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn routes_and_flows_parse_with_comments_and_blank_lines() {
    let f = parse(
        "# routes\n\n198.18.0.0/15 1\n0.0.0.0/0 0  # default\r\n2001:2::/32 2\n\
         10.0.0.1 198.18.0.1 1024 9 udp 1\n::1 ::2 1 2 6 0",
    )
    .unwrap();
    assert_eq!(
        f.routes,
        [
            Route {
                prefix: "198.18.0.0".parse().unwrap(),
                len: 15,
                port: 1
            },
            Route {
                prefix: "0.0.0.0".parse().unwrap(),
                len: 0,
                port: 0
            },
            Route {
                prefix: "2001:2::".parse().unwrap(),
                len: 32,
                port: 2
            },
        ]
    );
    assert_eq!(f.flows.len(), 2);
    assert_eq!(f.flows[0].proto, 17);
    assert_eq!((f.flows[0].sport, f.flows[0].dport), (1024, 9));
    assert_eq!(f.flows[1].proto, 6);
    assert_eq!(f.flows[1].to_string(), "::1 ::2 1 2 6 0");
}

#[test]
fn each_bad_line_is_an_error_naming_it() {
    let cases = [
        (
            "10.0.0.0/8 1\n10.0.0.0 1",
            "line 2: '10.0.0.0 1': '10.0.0.0' has no prefix length (PREFIX/LEN)",
        ),
        (
            "10.0.0.0/33 1",
            "line 1: '10.0.0.0/33 1': prefix length '33' is not in 0..=32",
        ),
        (
            "::/129 1",
            "line 1: '::/129 1': prefix length '129' is not in 0..=128",
        ),
        (
            "10.1.0.0/8 1",
            "line 1: '10.1.0.0/8 1': 10.1.0.0 has bits set beyond /8",
        ),
        (
            "10.0.0.0/8 x",
            "line 1: '10.0.0.0/8 x': 'x' is not a port number (0..=65535)",
        ),
        (
            "\n\n10.0.0.300/8 1",
            "line 3: '10.0.0.300/8 1': '10.0.0.300' is not an IPv4 or IPv6 address",
        ),
        (
            "10.0.0.0/8",
            "line 1: '10.0.0.0/8': 1 fields; expected `PREFIX/LEN PORT` (a route) or `SRC \
             DST SPORT DPORT PROTO PORT` (a flow)",
        ),
        (
            "10.0.0.1 ::1 1 2 udp 0",
            "line 1: '10.0.0.1 ::1 1 2 udp 0': source and destination are of different \
             families",
        ),
        (
            "10.0.0.1 10.0.0.2 1 2 icmp 0",
            "line 1: '10.0.0.1 10.0.0.2 1 2 icmp 0': 'icmp' is not a protocol (tcp, udp or \
             0..=255)",
        ),
        (
            "10.0.0.0/8 1\n\x1b[2J 1",
            "line 2: '\\u{1b}[2J 1': '\\u{1b}[2J' has no prefix length (PREFIX/LEN)",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(err(text), want, "{text:?}");
    }
    assert_eq!(
        parse(b"10.0.0.0/8 1\n10.0.\xff.0/8 1\n")
            .unwrap_err()
            .to_string(),
        "line 2: '10.0.\u{fffd}.0/8 1': not UTF-8 text"
    );
}

#[test]
fn errors_quote_at_most_100_characters() {
    // A long field in a line that is not too long: both quotes are cut.
    let long = "y".repeat(3000);
    let e = err(&format!("10.0.0.0/8 1\n10.0.0.0/8 {long}\n"));
    let quoted = format!("{}…", "y".repeat(100 - "10.0.0.0/8 ".len()));
    assert_eq!(
        e,
        format!(
            "line 2: '10.0.0.0/8 {quoted}': '{}…' is not a port number (0..=65535)",
            "y".repeat(100)
        )
    );
    // A line over the limit is refused whatever it holds.
    let e = err(&format!("# fine\n{}\n", "z".repeat(MAX_LINE_LEN + 1)));
    assert_eq!(
        e,
        format!(
            "line 2: '{}…': longer than {MAX_LINE_LEN} bytes",
            "z".repeat(100)
        )
    );
    // A line of exactly the limit is read (here: a comment).
    let max = format!("#{}\r\n10.0.0.0/8 1", "c".repeat(MAX_LINE_LEN - 1));
    assert_eq!(parse(&max).unwrap().routes.len(), 1);
    assert_eq!(read(max.as_bytes()).unwrap().routes.len(), 1);
    // Control characters count as their escapes.
    let e = err(&"\x07".repeat(500));
    assert!(e.chars().count() < 300, "{e}");
    assert!(e.contains(&format!("'{}…'", "\\u{7}".repeat(20))), "{e}");
}

#[test]
fn endless_input_stops_at_the_bounds() {
    // One endless line: refused after MAX_LINE_LEN bytes, not read to the end.
    let e = read(std::io::BufReader::new(std::io::repeat(b'x')))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "line 1: '{}…': longer than {MAX_LINE_LEN} bytes",
            "x".repeat(100)
        )
    );
    // Endless empty lines: refused after MAX_LINES.
    let e = read(std::io::BufReader::new(std::io::repeat(b'\n')))
        .unwrap_err()
        .to_string();
    assert_eq!(e, format!("more than {MAX_LINES} lines"));
    let mut lines = Vec::new();
    std::io::repeat(b'\n')
        .take(MAX_LINES as u64)
        .read_to_end(&mut lines)
        .unwrap();
    assert_eq!(parse(&lines).unwrap(), RoutesFile::default());
    lines.push(b'\n');
    assert!(matches!(parse(&lines), Err(RoutesError::TooManyLines)));
}

#[test]
fn load_refuses_what_is_not_a_regular_file() {
    for (path, kind) in [
        ("/dev/zero", "a character device"),
        ("/dev/null", "a character device"),
        ("/", "a directory"),
    ] {
        assert_eq!(
            load(path).unwrap_err().to_string(),
            format!("{kind}, not a regular file"),
            "{path}"
        );
    }
    assert!(matches!(
        load("/nonexistent/routes"),
        Err(RoutesError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound
    ));
    let path = std::env::temp_dir().join(format!("sluice-routes-{}", std::process::id()));
    std::fs::write(&path, "10.0.0.0/8 1\n").unwrap();
    let f = load(path.to_str().unwrap());
    std::fs::remove_file(&path).unwrap();
    assert_eq!(f.unwrap().routes.len(), 1);
}

#[test]
fn a_contradicting_duplicate_names_both_lines_and_a_repeat_is_kept_once() {
    assert_eq!(
        err("10.0.0.0/8 1\n\n10.0.0.0/8 2 # b\n"),
        "line 3: '10.0.0.0/8 2 # b': 10.0.0.0/8 already goes to port 1 on line 1 \
         ('10.0.0.0/8 1')"
    );
    assert_eq!(
        err("2001:db8::/32 0\n2001:0db8:0::/32 3\n"),
        "line 2: '2001:0db8:0::/32 3': 2001:db8::/32 already goes to port 0 on line 1 \
         ('2001:db8::/32 0')"
    );
    assert_eq!(
        err("::1 ::2 1 2 tcp 0\n::1 ::2 1 2 6 1\n"),
        "line 2: '::1 ::2 1 2 6 1': flow ::1 ::2 1 2 6 already goes to port 0 on line 1 \
         ('::1 ::2 1 2 6 0')"
    );
    let f = parse(
        "10.0.0.0/8 1\n10.0.0.0/9 1\n10.0.0.0/8 1\n1.1.1.1 2.2.2.2 1 2 udp 0\n\
         1.1.1.1 2.2.2.2 1 2 17 0\n1.1.1.1 2.2.2.2 1 2 6 1\n",
    )
    .unwrap();
    assert_eq!(f.routes.len(), 2, "the same route twice is kept once");
    assert_eq!(f.flows.len(), 2, "the same flow twice is kept once");
}

fn route() -> impl Strategy<Value = Route> {
    (any::<bool>(), any::<u128>(), any::<u8>(), any::<u16>()).prop_map(|(v4, bits, len, port)| {
        if v4 {
            let len = len % 33;
            let mask = u32::MAX.checked_shl(32 - len as u32).unwrap_or(0);
            Route {
                prefix: IpAddr::V4(Ipv4Addr::from(bits as u32 & mask)),
                len,
                port,
            }
        } else {
            let len = len % 129;
            let mask = u128::MAX.checked_shl(128 - len as u32).unwrap_or(0);
            Route {
                prefix: IpAddr::V6(Ipv6Addr::from(bits & mask)),
                len,
                port,
            }
        }
    })
}

fn flow() -> impl Strategy<Value = FlowRule> {
    (
        any::<bool>(),
        any::<(u128, u128)>(),
        any::<(u16, u16, u8, u16)>(),
    )
        .prop_map(|(v4, (s, d), (sport, dport, proto, port))| {
            let (src, dst) = if v4 {
                (
                    IpAddr::V4(Ipv4Addr::from(s as u32)),
                    IpAddr::V4(Ipv4Addr::from(d as u32)),
                )
            } else {
                (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)))
            };
            FlowRule {
                src,
                dst,
                sport,
                dport,
                proto,
                port,
            }
        })
}

/// The longest error any input can give: the line number, two quotes and
/// the fixed text around them.
const MAX_ERROR_CHARS: usize = 512;

/// Words routes files are made of, and some that break them.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("10.0.0.0/8".to_owned()),
        Just("::/0".to_owned()),
        Just("1".to_owned()),
        Just("65536".to_owned()),
        Just("udp".to_owned()),
        Just("#".to_owned()),
        Just("\n".to_owned()),
        Just("\r\n".to_owned()),
        Just(" ".to_owned()),
        Just("/".to_owned()),
        Just("1.2.3.4".to_owned()),
        Just("fe80::1".to_owned()),
        "[0-9a-f:./ ]{0,12}",
        "\\PC{0,8}",
    ]
}

proptest! {
    /// Any set of distinct valid entries, written one per line, reads back
    /// as the same entries in the same order.
    #[test]
    fn valid_entries_round_trip_through_their_text(
        routes in proptest::collection::vec(route(), 0..40),
        flows in proptest::collection::vec(flow(), 0..40),
        crlf in any::<bool>(),
        comment in any::<bool>(),
    ) {
        let mut seen = HashSet::new();
        let routes: Vec<Route> = routes
            .into_iter()
            .filter(|r| seen.insert((r.prefix, r.len)))
            .collect();
        let mut seen = HashSet::new();
        let flows: Vec<FlowRule> = flows
            .into_iter()
            .filter(|f| seen.insert((f.src, f.dst, f.sport, f.dport, f.proto)))
            .collect();
        let end = if crlf { "\r\n" } else { "\n" };
        let note = if comment { "  # note" } else { "" };
        let mut text = String::new();
        for r in &routes {
            text += &format!("{r}{note}{end}");
        }
        for f in &flows {
            text += &format!("{f}{note}{end}");
        }
        let file = parse(&text).unwrap();
        prop_assert_eq!(&file.routes, &routes);
        prop_assert_eq!(&file.flows, &flows);
        prop_assert_eq!(read(text.as_bytes()).unwrap(), file);
    }

    /// Arbitrary bytes: an answer, never a panic; an error is bounded.
    #[test]
    fn arbitrary_bytes_never_panic_and_errors_are_bounded(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        if let Err(e) = parse(&bytes) {
            prop_assert!(e.to_string().chars().count() <= MAX_ERROR_CHARS, "{}", e);
        }
    }

    /// Near-valid text (the words of routes files, shuffled): the same, and
    /// reading from a stream agrees with parsing the text.
    #[test]
    fn shuffled_words_never_panic_and_errors_are_bounded(
        words in proptest::collection::vec(token(), 0..60),
    ) {
        let text = words.concat();
        let parsed = parse(&text);
        if let Err(e) = &parsed {
            prop_assert!(e.to_string().chars().count() <= MAX_ERROR_CHARS, "{}", e);
        }
        let streamed = read(text.as_bytes());
        prop_assert_eq!(
            parsed.map_err(|e| e.to_string()),
            streamed.map_err(|e| e.to_string())
        );
    }
}
