//! `tenure top [PREFIX]`: a live terminal view of the leases under a prefix
//! and a scrolling feed of their events, driven by one `WatchLease` stream.
//!
//! The screen is a pure function of [`App`] (see [`App::draw`]), so unit
//! tests render it into ratatui's `TestBackend`; the terminal loop only
//! feeds `App` with watch events, keys and refresh ticks. Revoking needs the
//! admin grant: `top` probes it once with a one-item `ListLeases` and only
//! offers `r` when that succeeds, always behind a y/n confirmation.

use std::collections::{BTreeMap, VecDeque};
use std::io::IsTerminal;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use tokio::sync::mpsc;

use super::args::TopArgs;
use super::commands::default_reason;
use super::connect::{connect, request, Client};
use super::error::CliError;
use super::output::{clock, escape, event_name, proto_duration, proto_time, secs, ttl_left};
use crate::proto::{
    EventType, Lease, LeaseEvent, ListLeasesRequest, RevokeLeaseRequest, WatchLeaseRequest,
};

/// Most events kept in the feed.
const FEED_LEN: usize = 500;
/// Width of the TTL bar, in cells.
const BAR: usize = 20;

/// How the table is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// By name.
    Name,
    /// Least TTL left first: what expires next.
    TtlLeft,
    /// Highest fencing token first: the newest holdings.
    Token,
    /// By holder.
    Holder,
}

impl Sort {
    /// The next order, for the `s` key.
    fn next(self) -> Sort {
        match self {
            Sort::Name => Sort::TtlLeft,
            Sort::TtlLeft => Sort::Token,
            Sort::Token => Sort::Holder,
            Sort::Holder => Sort::Name,
        }
    }

    /// The name shown in the header.
    fn label(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::TtlLeft => "ttl left",
            Sort::Token => "token",
            Sort::Holder => "holder",
        }
    }
}

/// One line of the event feed.
#[derive(Debug, Clone)]
pub struct FeedItem {
    /// When it happened (server clock), or when it arrived.
    pub time: SystemTime,
    /// `ACQUIRED`, `EXPIRED`, ...
    pub kind: &'static str,
    /// The lease name.
    pub name: String,
    /// The holder concerned ("" when unknown).
    pub holder: String,
    /// Its fencing token (0 when unknown).
    pub token: u64,
}

/// A pending revoke, waiting for y/n.
#[derive(Debug, Clone)]
pub struct Confirm {
    /// The lease to revoke.
    pub name: String,
    /// Its holder, for the question.
    pub holder: String,
    /// Its fencing token: the revoke ends only this holding.
    pub token: u64,
}

/// Everything the screen shows.
#[derive(Debug)]
pub struct App {
    /// The server URL, for the header.
    pub server: String,
    /// What is watched (`jobs.>`).
    pub subject: String,
    /// The live holdings by name.
    pub leases: BTreeMap<String, Lease>,
    /// Recent events, newest last.
    pub feed: VecDeque<FeedItem>,
    /// Substring a name or holder must contain to be shown.
    pub filter: String,
    /// Whether keys are being typed into the filter.
    pub editing_filter: bool,
    /// The table order.
    pub sort: Sort,
    /// Selected row (in the shown, filtered, sorted order).
    pub table: TableState,
    /// A revoke waiting for confirmation.
    pub confirm: Option<Confirm>,
    /// Whether the caller may revoke: None until the probe answers.
    pub admin: Option<bool>,
    /// The last status message (errors, revoke results).
    pub status: String,
    /// Whether the watch stream is open and past its snapshot.
    pub live: bool,
    /// Set by `q`: leave the loop.
    pub quit: bool,
}

/// What the key handler asks the loop to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing beyond redrawing.
    None,
    /// Revoke this holding.
    Revoke {
        /// The lease name.
        name: String,
        /// Its fencing token.
        token: u64,
    },
}

impl App {
    /// An empty view.
    pub fn new(server: String, subject: String) -> App {
        App {
            server,
            subject,
            leases: BTreeMap::new(),
            feed: VecDeque::new(),
            filter: String::new(),
            editing_filter: false,
            sort: Sort::Name,
            table: TableState::default(),
            confirm: None,
            admin: None,
            status: "connecting...".into(),
            live: false,
            quit: false,
        }
    }

    /// The watch stream (re)opened: its snapshot replaces what we had.
    pub fn reset(&mut self) {
        self.leases.clear();
        self.live = false;
    }

    /// Applies one watch event.
    pub fn apply(&mut self, e: LeaseEvent) {
        let kind = EventType::try_from(e.r#type).unwrap_or(EventType::Unspecified);
        match kind {
            EventType::SnapshotComplete => {
                self.live = true;
                self.status = format!("watching {}", self.subject);
                return;
            }
            EventType::Current | EventType::Acquired | EventType::Renewed => {
                if let Some(l) = e.lease.clone() {
                    self.leases.insert(e.name.clone(), l);
                }
            }
            // A missed change: the holding shown has ended; what follows
            // says what is held now.
            EventType::Released | EventType::Expired | EventType::Revoked | EventType::Missed => {
                self.leases.remove(&e.name);
            }
            EventType::Unspecified => {}
        }
        if kind == EventType::Current {
            return;
        }
        self.feed.push_back(FeedItem {
            time: e.time.and_then(proto_time).unwrap_or_else(SystemTime::now),
            kind: event_name(e.r#type),
            name: e.name,
            holder: e.holder,
            token: e.fencing_token,
        });
        while self.feed.len() > FEED_LEN {
            self.feed.pop_front();
        }
    }

    /// The leases shown: filtered and sorted.
    pub fn shown(&self, now: SystemTime) -> Vec<&Lease> {
        let mut v: Vec<&Lease> = self
            .leases
            .values()
            .filter(|l| {
                self.filter.is_empty()
                    || l.name.contains(&self.filter)
                    || l.holder.contains(&self.filter)
            })
            .collect();
        match self.sort {
            Sort::Name => {}
            Sort::TtlLeft => v.sort_by_key(|l| ttl_left(l, now).unwrap_or_default()),
            Sort::Token => v.sort_by_key(|l| std::cmp::Reverse(l.fencing_token)),
            Sort::Holder => v.sort_by(|a, b| a.holder.cmp(&b.holder).then(a.name.cmp(&b.name))),
        }
        v
    }

    /// Handles one key press.
    pub fn key(&mut self, k: KeyEvent) -> Action {
        if k.kind != KeyEventKind::Press {
            return Action::None;
        }
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            self.quit = true;
            return Action::None;
        }
        if let Some(c) = self.confirm.take() {
            if matches!(k.code, KeyCode::Char('y') | KeyCode::Char('Y')) {
                self.status = format!("revoking {} (token {})...", c.name, c.token);
                return Action::Revoke {
                    name: c.name,
                    token: c.token,
                };
            }
            self.status = "revoke cancelled".into();
            return Action::None;
        }
        if self.editing_filter {
            match k.code {
                KeyCode::Enter => self.editing_filter = false,
                KeyCode::Esc => {
                    self.editing_filter = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) => self.filter.push(c),
                _ => {}
            }
            self.table.select(Some(0));
            return Action::None;
        }
        let count = self.shown(SystemTime::now()).len();
        match k.code {
            KeyCode::Char('q') | KeyCode::Esc => self.quit = true,
            KeyCode::Char('/') => {
                self.editing_filter = true;
                self.filter.clear();
            }
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Down | KeyCode::Char('j') if count > 0 => {
                let i = self.table.selected().map_or(0, |i| (i + 1).min(count - 1));
                self.table.select(Some(i));
            }
            KeyCode::Up | KeyCode::Char('k') if count > 0 => {
                let i = self.table.selected().map_or(0, |i| i.saturating_sub(1));
                self.table.select(Some(i));
            }
            KeyCode::Char('r') => match self.admin {
                Some(true) => {
                    let now = SystemTime::now();
                    let shown = self.shown(now);
                    match self.table.selected().and_then(|i| shown.get(i)) {
                        Some(l) => {
                            self.confirm = Some(Confirm {
                                name: l.name.clone(),
                                holder: l.holder.clone(),
                                token: l.fencing_token,
                            })
                        }
                        None => self.status = "select a lease first (↑/↓)".into(),
                    }
                }
                Some(false) => self.status = "revoking needs the admin grant on these names".into(),
                None => self.status = "still checking for the admin grant".into(),
            },
            _ => {}
        }
        Action::None
    }

    /// Draws the whole screen.
    pub fn draw(&mut self, f: &mut Frame) {
        let now = SystemTime::now();
        let area = f.area();
        let [head, table_area, feed_area, foot] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Percentage(55),
            Constraint::Fill(1),
            Constraint::Length(1),
        ])
        .areas(area);

        let shown = self.shown(now);
        let count = shown.len();
        let state = if self.live { "live" } else { "connecting" };
        let filter = if self.filter.is_empty() && !self.editing_filter {
            String::new()
        } else {
            format!(
                "  filter: {}{}",
                self.filter,
                if self.editing_filter { "▏" } else { "" }
            )
        };
        f.render_widget(
            Paragraph::new(Line::from(vec![
                Span::styled("tenure top", Style::new().add_modifier(Modifier::BOLD)),
                Span::raw(format!(
                    "  {}  {}  {} lease{}  sort: {}  [{state}]{filter}",
                    self.server,
                    self.subject,
                    count,
                    if count == 1 { "" } else { "s" },
                    self.sort.label()
                )),
            ])),
            head,
        );

        let rows: Vec<Row> = shown
            .iter()
            .map(|l| {
                let ttl = l.ttl.map(proto_duration).unwrap_or_default();
                let left = ttl_left(l, now).unwrap_or_default();
                let color = if ttl.is_zero() || left.as_secs_f64() < ttl.as_secs_f64() / 3.0 {
                    Color::Red
                } else {
                    Color::Green
                };
                Row::new(vec![
                    Cell::from(escape(&l.name).into_owned()),
                    Cell::from(escape(&l.holder).into_owned()),
                    Cell::from(l.fencing_token.to_string()),
                    Cell::from(l.revision.to_string()),
                    Cell::from(Line::from(vec![
                        Span::styled(bar(left, ttl), Style::new().fg(color)),
                        Span::raw(format!(" {:>6}/{}", secs(left), secs(ttl))),
                    ])),
                    Cell::from("-"),
                ])
            })
            .collect();
        if self.table.selected().is_some_and(|i| i >= count) {
            self.table.select(count.checked_sub(1));
        }
        let table = Table::new(
            rows,
            [
                Constraint::Fill(2),
                Constraint::Fill(1),
                Constraint::Length(7),
                Constraint::Length(8),
                Constraint::Length((BAR + 15) as u16),
                Constraint::Length(7),
            ],
        )
        .header(
            Row::new(["NAME", "HOLDER", "TOKEN", "REV", "TTL LEFT", "WAITERS"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(
            Block::new()
                .borders(Borders::TOP | Borders::BOTTOM)
                .title(" leases "),
        )
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ");
        f.render_stateful_widget(table, table_area, &mut self.table);

        let lines = feed_area.height.saturating_sub(1) as usize;
        let recent: Vec<&FeedItem> = self.feed.iter().rev().take(lines).rev().collect();
        let name_w = recent
            .iter()
            .map(|e| escape(&e.name).chars().count())
            .max()
            .unwrap_or(0)
            .min(48);
        let holder_w = recent
            .iter()
            .map(|e| escape(&e.holder).chars().count())
            .max()
            .unwrap_or(1)
            .min(32);
        let feed: Vec<Line> = recent
            .into_iter()
            .map(|e| {
                let color = match e.kind {
                    "ACQUIRED" => Color::Green,
                    "RENEWED" => Color::Blue,
                    "RELEASED" => Color::Cyan,
                    "EXPIRED" => Color::Yellow,
                    "REVOKED" => Color::Red,
                    _ => Color::Reset,
                };
                Line::from(vec![
                    Span::raw(format!("{}  ", clock(e.time))),
                    Span::styled(format!("{:<8}", e.kind), Style::new().fg(color)),
                    Span::raw(format!(
                        "  {:<name_w$}  {:<holder_w$}  token {}",
                        escape(&e.name),
                        if e.holder.is_empty() {
                            "-".into()
                        } else {
                            escape(&e.holder)
                        },
                        e.token
                    )),
                ])
            })
            .collect();
        f.render_widget(
            Paragraph::new(feed).block(Block::new().borders(Borders::TOP).title(" events ")),
            feed_area,
        );

        let help = if self.editing_filter {
            "type to filter by name or holder  Enter keep  Esc clear".to_string()
        } else {
            let revoke = match self.admin {
                Some(true) => "  r revoke",
                _ => "",
            };
            format!(
                "q quit  / filter  s sort  ↑↓ select{revoke}   {}",
                escape(&self.status)
            )
        };
        f.render_widget(Paragraph::new(help), foot);

        if let Some(c) = &self.confirm {
            let q = format!(
                " Revoke {} held by {} (token {})? y/n ",
                escape(&c.name),
                escape(&c.holder),
                c.token
            );
            let w = (q.chars().count() as u16 + 2).min(area.width);
            let r = Rect {
                x: area.width.saturating_sub(w) / 2,
                y: area.height / 2,
                width: w,
                height: 3.min(area.height),
            };
            f.render_widget(Clear, r);
            f.render_widget(
                Paragraph::new(q).block(Block::bordered().title(" confirm ")),
                r,
            );
        }
    }
}

/// A draining bar: full at the TTL, empty at zero.
pub fn bar(left: Duration, ttl: Duration) -> String {
    let filled = if ttl.is_zero() {
        0
    } else {
        ((left.as_secs_f64() / ttl.as_secs_f64()) * BAR as f64).ceil() as usize
    };
    let filled = filled.min(BAR);
    format!("{}{}", "█".repeat(filled), "░".repeat(BAR - filled))
}

/// The WatchLease subject for a `top` argument: none is `>`, `jobs` and
/// `jobs.` are `jobs.>`, a subject ending in `>` is kept.
pub fn subject(prefix: Option<&str>) -> String {
    match prefix.map(str::trim) {
        None | Some("") | Some(">") => ">".into(),
        Some(p) if p.ends_with('>') => p.into(),
        Some(p) if p.ends_with('.') => format!("{p}>"),
        Some(p) => format!("{p}.>"),
    }
}

/// The ListLeases prefix matching a subject (`jobs.>` → `jobs.`).
fn list_prefix(subject: &str) -> String {
    subject.trim_end_matches('>').to_string()
}

/// What reaches the terminal loop.
enum Msg {
    /// The watch (re)opened.
    Reset,
    /// One event.
    Event(Box<LeaseEvent>),
    /// The watch failed; it is being reopened.
    WatchError(CliError),
    /// A key.
    Key(KeyEvent),
    /// The admin probe answered.
    Admin(bool),
    /// A revoke finished.
    Revoked(Result<String, CliError>),
}

/// Runs `tenure top`; returns the exit code.
pub async fn top(a: TopArgs) -> Result<(), CliError> {
    if a.refresh.is_zero() {
        return Err(CliError::usage(
            "--refresh 0 would redraw without pause: give e.g. 250ms",
        ));
    }
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(CliError::usage(
            "tenure top needs a terminal; use `tenure watch` for a stream of events",
        ));
    }
    let client = connect(&a.conn).await?;
    let subject = subject(a.prefix.as_deref());
    let mut app = App::new(a.conn.server.clone(), subject.clone());
    let (tx, mut rx) = mpsc::channel::<Msg>(1024);

    let watcher = tokio::spawn(watch_loop(client.clone(), subject.clone(), tx.clone()));
    let prober = tokio::spawn(probe_admin(
        client.clone(),
        a.conn.clone(),
        list_prefix(&subject),
        tx.clone(),
    ));
    let mut terminal = ratatui::try_init()
        .map_err(|e| CliError::usage(format!("cannot set up the terminal: {e}")))?;
    let keys_tx = tx.clone();
    std::thread::spawn(move || read_keys(keys_tx));
    let mut tick = tokio::time::interval(a.refresh);
    let result = loop {
        if let Err(e) = terminal.draw(|f| app.draw(f)) {
            break Err(CliError::usage(format!("cannot draw: {e}")));
        }
        if app.quit {
            break Ok(());
        }
        tokio::select! {
            _ = tick.tick() => {}
            msg = rx.recv() => match msg {
                None => break Ok(()),
                Some(Msg::Reset) => app.reset(),
                Some(Msg::Event(e)) => app.apply(*e),
                Some(Msg::WatchError(e)) => {
                    app.live = false;
                    app.status = format!("{e} (reconnecting)");
                }
                Some(Msg::Admin(ok)) => app.admin = Some(ok),
                Some(Msg::Revoked(r)) => {
                    app.status = match r {
                        Ok(s) => s,
                        Err(e) => e.to_string(),
                    }
                }
                Some(Msg::Key(k)) => {
                    if let Action::Revoke { name, token } = app.key(k) {
                        let mut c = client.clone();
                        let conn = a.conn.clone();
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            let r = c
                                .revoke_lease(request(
                                    RevokeLeaseRequest {
                                        name: name.clone(),
                                        reason: format!("{} (from tenure top)", default_reason()),
                                        fencing_token: token,
                                        slot: 0,
                                    },
                                    &conn,
                                    Duration::ZERO,
                                ))
                                .await
                                .map(|_| format!("revoked {name} (token {token})"))
                                .map_err(|s| CliError::from_status(&s));
                            let _ = tx.send(Msg::Revoked(r)).await;
                        });
                    }
                }
            }
        }
    };
    ratatui::restore();
    watcher.abort();
    prober.abort();
    result
}

/// Keeps one WatchLease open on `subject`, reopening it after failures.
async fn watch_loop(mut client: Client, subject: String, tx: mpsc::Sender<Msg>) {
    let mut backoff = Duration::from_millis(200);
    loop {
        match client
            .watch_lease(WatchLeaseRequest {
                name: subject.clone(),
                event_types: vec![],
                start_revision: 0,
                shard_revisions: Vec::new(),
            })
            .await
        {
            Ok(s) => {
                if tx.send(Msg::Reset).await.is_err() {
                    return;
                }
                let mut stream = s.into_inner();
                loop {
                    match stream.next().await {
                        Some(Ok(m)) => {
                            backoff = Duration::from_millis(200);
                            if let Some(e) = m.event {
                                if tx.send(Msg::Event(Box::new(e))).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Some(Err(s)) => {
                            let _ = tx.send(Msg::WatchError(CliError::from_status(&s))).await;
                            break;
                        }
                        None => {
                            let _ = tx
                                .send(Msg::WatchError(CliError {
                                    code: 1,
                                    reason: "UNAVAILABLE".into(),
                                    message: "the server ended the watch".into(),
                                    hint: None,
                                }))
                                .await;
                            break;
                        }
                    }
                }
            }
            Err(s) => {
                if tx
                    .send(Msg::WatchError(CliError::from_status(&s)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Finds out whether the caller has the admin grant here: ListLeases is
/// admin-only, so a one-item listing answers it without side effects.
async fn probe_admin(
    mut client: Client,
    conn: super::args::Connection,
    prefix: String,
    tx: mpsc::Sender<Msg>,
) {
    let ok = client
        .list_leases(request(
            ListLeasesRequest {
                prefix,
                page_size: 1,
                page_token: String::new(),
            },
            &conn,
            Duration::ZERO,
        ))
        .await
        .is_ok();
    let _ = tx.send(Msg::Admin(ok)).await;
}

/// Reads keys on a thread of its own (crossterm's reader blocks) until the
/// loop is gone.
fn read_keys(tx: mpsc::Sender<Msg>) {
    while !tx.is_closed() {
        match event::poll(Duration::from_millis(100)) {
            Ok(true) => {
                if let Ok(Event::Key(k)) = event::read() {
                    if tx.blocking_send(Msg::Key(k)).is_err() {
                        return;
                    }
                }
            }
            Ok(false) => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn lease(name: &str, holder: &str, token: u64, ttl_s: i64, written: SystemTime) -> Lease {
        let d = written.duration_since(std::time::UNIX_EPOCH).unwrap();
        Lease {
            name: name.into(),
            holder: holder.into(),
            fencing_token: token,
            revision: token,
            ttl: Some(prost_types::Duration {
                seconds: ttl_s,
                nanos: 0,
            }),
            renew_time: Some(prost_types::Timestamp {
                seconds: d.as_secs() as i64,
                nanos: d.subsec_nanos() as i32,
            }),
            ..Default::default()
        }
    }

    fn event(t: EventType, l: &Lease) -> LeaseEvent {
        LeaseEvent {
            r#type: t as i32,
            name: l.name.clone(),
            revision: l.revision,
            holder: l.holder.clone(),
            fencing_token: l.fencing_token,
            lease: matches!(
                t,
                EventType::Current | EventType::Acquired | EventType::Renewed
            )
            .then(|| l.clone()),
            time: l.renew_time,
            slot: l.slot,
            ..Default::default()
        }
    }

    fn screen(app: &mut App) -> String {
        let mut term = Terminal::new(TestBackend::new(120, 30)).unwrap();
        term.draw(|f| app.draw(f)).unwrap();
        let buf = term.backend().buffer().clone();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    /// Acquired leases show as rows with a bar; an expiry removes the row
    /// and lands in the feed.
    #[test]
    fn rows_and_feed() {
        let mut app = App::new("http://x".into(), "jobs.>".into());
        let now = SystemTime::now();
        let l = lease("jobs.a", "worker-1", 7, 10, now);
        app.apply(event(EventType::Acquired, &l));
        let s = screen(&mut app);
        assert!(s.contains("jobs.a") && s.contains("worker-1"), "{s}");
        assert!(s.contains("ACQUIRED"), "{s}");
        assert!(s.contains('█'), "{s}");
        app.apply(event(EventType::Expired, &l));
        let s = screen(&mut app);
        assert!(s.contains("EXPIRED"), "{s}");
        assert!(s.contains("0 leases"), "{s}");
    }

    /// The filter hides rows; sorting by TTL puts what expires next first.
    #[test]
    fn filter_and_sort() {
        let mut app = App::new("http://x".into(), ">".into());
        let now = SystemTime::now();
        app.apply(event(
            EventType::Current,
            &lease("a.long", "w1", 1, 60, now),
        ));
        app.apply(event(
            EventType::Current,
            &lease("b.short", "w2", 2, 5, now),
        ));
        assert_eq!(app.shown(now)[0].name, "a.long");
        app.key(key(KeyCode::Char('s')));
        assert_eq!(app.sort, Sort::TtlLeft);
        assert_eq!(app.shown(now)[0].name, "b.short");
        app.key(key(KeyCode::Char('/')));
        for c in "long".chars() {
            app.key(key(KeyCode::Char(c)));
        }
        app.key(key(KeyCode::Enter));
        let shown: Vec<_> = app.shown(now).iter().map(|l| l.name.clone()).collect();
        assert_eq!(shown, ["a.long"]);
    }

    /// Revoke asks first, and only with the admin grant.
    #[test]
    fn revoke_needs_admin_and_confirmation() {
        let mut app = App::new("http://x".into(), ">".into());
        let now = SystemTime::now();
        app.apply(event(EventType::Current, &lease("a", "w1", 4, 60, now)));
        app.key(key(KeyCode::Down));
        app.admin = Some(false);
        assert_eq!(app.key(key(KeyCode::Char('r'))), Action::None);
        assert!(app.confirm.is_none());
        app.admin = Some(true);
        assert_eq!(app.key(key(KeyCode::Char('r'))), Action::None);
        assert!(screen(&mut app).contains("Revoke a held by w1 (token 4)? y/n"));
        assert_eq!(
            app.key(key(KeyCode::Char('y'))),
            Action::Revoke {
                name: "a".into(),
                token: 4
            }
        );
        app.key(key(KeyCode::Char('r')));
        assert_eq!(app.key(key(KeyCode::Char('n'))), Action::None);
    }

    /// Subjects from the PREFIX argument.
    #[test]
    fn subjects() {
        assert_eq!(subject(None), ">");
        assert_eq!(subject(Some("jobs")), "jobs.>");
        assert_eq!(subject(Some("jobs.")), "jobs.>");
        assert_eq!(subject(Some("jobs.>")), "jobs.>");
        assert_eq!(list_prefix("jobs.>"), "jobs.");
        assert_eq!(list_prefix(">"), "");
    }

    /// The bar drains with the TTL.
    #[test]
    fn bars() {
        let t = Duration::from_secs(10);
        assert_eq!(bar(t, t).chars().filter(|&c| c == '█').count(), BAR);
        assert_eq!(
            bar(Duration::from_secs(5), t)
                .chars()
                .filter(|&c| c == '█')
                .count(),
            BAR / 2
        );
        assert_eq!(
            bar(Duration::ZERO, t).chars().filter(|&c| c == '█').count(),
            0
        );
    }
}
