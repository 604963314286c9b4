//! `sluice stats` on a terminal: a full-screen view redrawn every refresh
//! (ratatui on its crossterm backend). `q`, Esc or Ctrl-C quits; the
//! terminal is restored however the view ends (an error, a panic: ratatui's
//! panic hook restores it first).

use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::{DefaultTerminal, Frame};

use super::Source;
use super::rates::{Rates, si};
use crate::app::observe::snapshot::Snapshot;

/// Restores the terminal when dropped.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Shows `source` until a quit key, `count` refreshes, or an error.
pub fn run(source: &mut Source, interval: Duration, count: Option<u64>) -> Result<(), String> {
    let mut before = source.read()?;
    let mut terminal = ratatui::try_init().map_err(|e| format!("terminal: {e}"))?;
    let _restore = Restore;
    let mut shown = 0u64;
    let mut now_snapshot = before.clone();
    let mut rates = Rates::default();
    draw(
        &mut terminal,
        &now_snapshot,
        &rates,
        "waiting for the first refresh",
    )?;
    let mut next = Instant::now() + interval;
    loop {
        // Keys until the next refresh.
        let wait = next.saturating_duration_since(Instant::now());
        if event::poll(wait).map_err(|e| format!("terminal: {e}"))? {
            if let Event::Key(key) = event::read().map_err(|e| format!("terminal: {e}"))?
                && key.kind == KeyEventKind::Press
                && (matches!(key.code, KeyCode::Char('q') | KeyCode::Esc)
                    || (key.code == KeyCode::Char('c')
                        && key.modifiers.contains(KeyModifiers::CONTROL)))
            {
                return Ok(());
            }
            continue;
        }
        next += interval;
        now_snapshot = source.read()?;
        rates = Rates::between(&before, &now_snapshot);
        before = now_snapshot.clone();
        shown += 1;
        draw(&mut terminal, &now_snapshot, &rates, "q: quit")?;
        if count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
    }
}

fn draw(
    terminal: &mut DefaultTerminal,
    s: &Snapshot,
    r: &Rates,
    status: &str,
) -> Result<(), String> {
    terminal
        .draw(|frame| render(frame, s, r, status))
        .map(|_| ())
        .map_err(|e| format!("terminal: {e}"))
}

fn render(frame: &mut Frame, s: &Snapshot, r: &Rates, status: &str) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let [head, ports, lcores, drops, pools] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(s.ports.len() as u16 + 3),
        Constraint::Length(s.lcores.len() as u16 + 3),
        Constraint::Min(3),
        Constraint::Length(s.pools.len() as u16 + 3),
    ])
    .areas(frame.area());
    frame.render_widget(
        Paragraph::new(format!(
            "sluice {} — file prefix {}, pid {}, up {:.0} s — {status}",
            s.command, s.file_prefix, s.pid, s.uptime_s
        ))
        .style(bold),
        head,
    );
    let port_rows = s.ports.iter().map(|p| {
        let rate = r
            .ports
            .iter()
            .find(|q| q.id == p.id)
            .cloned()
            .unwrap_or_default();
        Row::new(vec![
            p.id.to_string(),
            p.driver.clone(),
            format!("{}pps", si(rate.rx_pps)),
            format!("{}bit/s", si(rate.rx_bps)),
            format!("{}pps", si(rate.tx_pps)),
            format!("{}bit/s", si(rate.tx_bps)),
            p.ipackets.to_string(),
            p.opackets.to_string(),
        ])
    });
    frame.render_widget(
        Table::new(port_rows, [Constraint::Fill(1); 8])
            .header(
                Row::new([
                    "port", "driver", "rx", "rx bits", "tx", "tx bits", "rx total", "tx total",
                ])
                .style(bold),
            )
            .block(Block::bordered().title("Ports")),
        ports,
    );
    let lcore_rows = r.lcores.iter().map(|l| {
        let cpu = s
            .lcores
            .iter()
            .find(|k| k.lcore == l.lcore)
            .and_then(|k| k.cpu)
            .map_or_else(|| "-".to_owned(), |c| c.to_string());
        Row::new(vec![
            l.lcore.to_string(),
            cpu,
            l.busy_share
                .map_or_else(|| "-".to_owned(), |b| format!("{:.1} %", b * 100.0)),
            l.cycles_per_packet
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.1}")),
            format!("{}pps", si(l.pps)),
        ])
    });
    frame.render_widget(
        Table::new(lcore_rows, [Constraint::Fill(1); 5])
            .header(Row::new(["lcore", "cpu", "busy", "cycles/packet", "rx"]).style(bold))
            .block(Block::bordered().title("Lcores")),
        lcores,
    );
    let drop_rows = s.drops.iter().map(|d| {
        Row::new(vec![
            d.reason.clone(),
            d.port
                .map_or_else(|| "application".to_owned(), |p| p.to_string()),
            d.packets.to_string(),
        ])
    });
    frame.render_widget(
        Table::new(
            drop_rows,
            [
                Constraint::Fill(2),
                Constraint::Fill(1),
                Constraint::Fill(1),
            ],
        )
        .header(Row::new(["reason", "port", "packets"]).style(bold))
        .block(Block::bordered().title("Drops")),
        drops,
    );
    let pool_rows = s.pools.iter().map(|p| {
        Row::new(vec![
            p.name.clone(),
            p.size.to_string(),
            p.in_ring.to_string(),
            p.in_caches.iter().map(|c| c.1).sum::<u64>().to_string(),
            p.rx_posted.iter().map(|c| c.2).sum::<u64>().to_string(),
            p.tx_waiting.iter().map(|c| c.2).sum::<u64>().to_string(),
            p.in_flight.iter().map(|c| c.1).sum::<u64>().to_string(),
            p.held_by_app.to_string(),
        ])
    });
    frame.render_widget(
        Table::new(pool_rows, [Constraint::Fill(1); 8])
            .header(
                Row::new([
                    "pool",
                    "buffers",
                    "ring",
                    "caches",
                    "rx posted",
                    "tx waiting",
                    "in flight",
                    "app",
                ])
                .style(bold),
            )
            .block(Block::bordered().title("Buffers")),
        pools,
    );
}
