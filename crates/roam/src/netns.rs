//! An emulated cluster on one machine for `roam launch --netns`: one network namespace per node,
//! joined by a bridge, with per-link bandwidth shaping.
//!
//! Topology of one run (prefix `roam-<pid>-<seq>`):
//!
//! ```text
//!  namespace <prefix>-n0             namespace <prefix>-sw             namespace <prefix>-n1
//!  roam0 10.77.0.1/16 ==== veth ==== n0 ─┐                ┌─ n1 ==== veth ==== roam0 10.77.0.2/16
//!  (tbf: node → switch)              (tbf: switch → node)  br0  ...
//! ```
//!
//! With a bandwidth, both directions of every node link are shaped by a token bucket (`tc tbf`):
//! the node's end shapes what it sends, the switch's end what it receives, like a full-duplex
//! NIC on a switch port. A per-rank rate (`--node-bandwidth`) replaces the common one on that
//! node's link; without a common rate only the links given one are shaped. Latency is not added here: kernels without netem cannot delay packets,
//! so the launcher sets the transport's user-space emulation (`ROAM_EMULATE_LATENCY_US`). The
//! options that describe the network (profiles, rates, [`Network`]) are `netns_profile.rs`'s;
//! this file builds and removes the namespaces.
//!
//! Invariants:
//! - Nothing is created in the launcher's own namespace: the bridge and both ends of every veth
//!   live in namespaces this run created (`ip -n <switch> link add ... peer ... netns <node>`),
//!   so the host's interfaces and routes are never touched. Addresses ([`SUBNET`]) exist only
//!   behind the run's own bridge, so concurrent runs may reuse them without meeting.
//! - Namespace names are `<prefix>-sw` and `<prefix>-n<rank>` with a prefix `roam-<pid>-<seq>`
//!   (the launcher's pid and a per-process sequence number), so concurrent runs never collide,
//!   and a namespace whose launcher pid is gone is stale: [`remove_stale`] deletes it.
//! - A [`Cluster`] deletes every namespace it created when destroyed, and when dropped (a failed
//!   setup, an early return, a panic). It first kills any process still inside them (a
//!   leftover a node forked), so the namespaces really go; deleting a namespace deletes its
//!   veth end, whose peer goes with it, and the bridge.
//! - Every `ip`/`tc` command runs in its own process group, so a terminal's Ctrl-C, meant for
//!   the launcher, cannot kill a setup or cleanup command half-way.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, anyhow, bail, ensure};

/// The network profile the launcher chose (`loopback`, `10gbe`, `1gbe`, `custom`), exported to
/// every node so that it can report what network it ran on.
pub const ROAM_NETWORK_PROFILE: &str = "ROAM_NETWORK_PROFILE";
/// The per-direction bandwidth of the node's own link in `tc` syntax (e.g. `1gbit`; its
/// `--node-bandwidth` rate if it has one); set only when that link is shaped.
pub const ROAM_NETWORK_BANDWIDTH: &str = "ROAM_NETWORK_BANDWIDTH";
/// The node's network namespace; set only under `--netns`.
pub const ROAM_NETNS: &str = "ROAM_NETNS";

/// Most nodes one `--netns` run creates namespaces for.
pub const MAX_NODES: u32 = 1024;
/// The node subnet inside every run: node `r` is `10.77.0.0 + r + 1`.
pub const SUBNET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 77, 0, 0), 16);
/// The coordinator's port on node 0 (a fresh namespace has every port free).
pub const COORDINATOR_PORT: u16 = 29500;
/// The interface name of a node's link, inside its namespace.
pub const NODE_INTERFACE: &str = "roam0";
/// The bridge, inside the switch namespace.
const BRIDGE: &str = "br0";
/// Where `ip netns` keeps its named namespaces.
const NETNS_DIR: &str = "/run/netns";
/// Name prefix of every namespace this module creates.
const NAME_PREFIX: &str = "roam-";
/// Queueing bound of each token bucket (tc's `latency`).
const TBF_QUEUE: &str = "4ms";
/// Where to look for `ip` and `tc` besides `PATH` (sbin is often missing from a user's PATH).
const EXTRA_TOOL_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

static SEQ: AtomicU64 = AtomicU64::new(0);

#[path = "netns_profile.rs"]
mod profile;
use profile::rate_of;
pub use profile::{Network, NodeRate, Profile, Rate, check_node_rates};

/// The address node `rank` has inside its namespace.
pub fn node_ip(rank: u32) -> Ipv4Addr {
    let host = rank + 1;
    debug_assert!(host < 1 << 16, "node {rank} does not fit the /16");
    let [_, _, hi, lo] = host.to_be_bytes();
    let [a, b, _, _] = SUBNET.0.octets();
    Ipv4Addr::new(a, b, hi, lo)
}

/// The `ip` and `tc` programs, found and checked by [`preflight`].
#[derive(Clone, Debug)]
pub struct Tools {
    ip: PathBuf,
    tc: Option<PathBuf>,
}

impl Tools {
    /// The `ip` program.
    pub fn ip(&self) -> &Path {
        &self.ip
    }

    /// The `tc` program, if shaping was asked for.
    pub fn tc(&self) -> Option<&Path> {
        self.tc.as_deref()
    }

    /// Creates and deletes a throwaway namespace: whether `ip netns add` really works here
    /// (root in a restricted container may still lack the capabilities).
    pub fn probe(&self) -> anyhow::Result<()> {
        let name = format!("{}-probe", run_prefix());
        run_tool(&self.ip, &["netns", "add", &name])
            .context("network namespaces are not usable here")?;
        delete_namespaces(&self.ip, &[name]).map_err(|p| anyhow!(p.join("; ")))
    }
}

/// Checks that namespaces can be set up: root, `ip` (and `tc` if `shaping`), `ip netns`.
/// Every refusal says why and what to do instead.
pub fn preflight(shaping: bool) -> anyhow::Result<Tools> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    ensure!(
        euid == 0,
        "roam launch --netns (and --profile 10gbe, 1gbe or --bandwidth) must run as root: \
         network namespaces, veth links, a bridge and tc qdiscs need CAP_SYS_ADMIN and \
         CAP_NET_ADMIN, and this process runs as uid {euid}. Run it as root (e.g. sudo), or \
         stay on loopback: --latency-us L alone emulates latency without namespaces"
    );
    let ip = find_program(OsStr::new("ip"), true).ok_or_else(|| {
        anyhow!("--netns needs the `ip` program (iproute2), found neither in PATH nor in /usr/sbin, /sbin")
    })?;
    let tc = if shaping {
        Some(find_program(OsStr::new("tc"), true).ok_or_else(|| {
            anyhow!("bandwidth shaping needs the `tc` program (iproute2), found neither in PATH nor in /usr/sbin, /sbin")
        })?)
    } else {
        None
    };
    run_tool(&ip, &["netns", "list"]).context("`ip netns` is not usable here")?;
    Ok(Tools { ip, tc })
}

/// Finds `program` as `Command` would: a path if it contains `/`, else the first executable
/// file of that name in `PATH` (and, with `sbin`, in the usual system directories).
pub fn find_program(program: &OsStr, sbin: bool) -> Option<PathBuf> {
    let executable = |p: &Path| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return executable(path).then(|| path.to_path_buf());
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if sbin {
        dirs.extend(EXTRA_TOOL_DIRS.iter().map(PathBuf::from));
    }
    dirs.into_iter()
        .map(|d| d.join(program))
        .find(|p| executable(p))
}

/// A unique name prefix for a new set of namespaces of this process.
fn run_prefix() -> String {
    format!(
        "{NAME_PREFIX}{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs a tool in its own process group, returning its stdout; failures name the command and
/// carry its stderr.
fn run_tool(tool: &Path, args: &[&str]) -> anyhow::Result<String> {
    let line = format!("{} {}", tool.display(), args.join(" "));
    let out = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .with_context(|| format!("running `{line}`"))?;
    if !out.status.success() {
        bail!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The namespaces of one run: created by [`Cluster::create`], deleted by [`Cluster::destroy`]
/// or on drop.
#[derive(Debug)]
pub struct Cluster {
    tools: Tools,
    prefix: String,
    nodes: u32,
    bandwidth: Option<Rate>,
    /// Per-rank overrides of `bandwidth`, sorted by rank.
    node_bandwidth: Vec<NodeRate>,
    /// Namespaces that exist now, in creation order (the switch first).
    created: Vec<String>,
}

impl Cluster {
    /// Creates the switch and one namespace per node, links and addresses them, and shapes the
    /// links. On failure everything created so far is deleted again.
    pub fn create(tools: Tools, nodes: u32, bandwidth: Option<Rate>) -> anyhow::Result<Self> {
        Self::create_shaped(tools, nodes, bandwidth, &[])
    }

    /// [`Cluster::create`] with per-rank rates overriding `bandwidth` for those nodes' links
    /// (both directions); without `bandwidth` the other links stay unshaped.
    pub fn create_shaped(
        tools: Tools,
        nodes: u32,
        bandwidth: Option<Rate>,
        node_bandwidth: &[NodeRate],
    ) -> anyhow::Result<Self> {
        ensure!(
            (1..=MAX_NODES).contains(&nodes),
            "--netns supports 1..={MAX_NODES} nodes, got {nodes}"
        );
        check_node_rates(node_bandwidth, nodes)?;
        ensure!(
            (bandwidth.is_none() && node_bandwidth.is_empty()) || tools.tc.is_some(),
            "bandwidth shaping needs `tc`; the tools were checked without it"
        );
        let mut node_bandwidth = node_bandwidth.to_vec();
        node_bandwidth.sort_by_key(|n| n.rank);
        let mut cluster = Self {
            tools,
            prefix: run_prefix(),
            nodes,
            bandwidth,
            node_bandwidth,
            created: Vec::with_capacity(nodes as usize + 1),
        };
        // On error `cluster` drops here, deleting what was created.
        cluster
            .build()
            .with_context(|| format!("setting up network namespaces {}-*", cluster.prefix))?;
        Ok(cluster)
    }

    fn build(&mut self) -> anyhow::Result<()> {
        let sw = self.switch_namespace();
        self.add_namespace(&sw)?;
        self.ip(&["-n", &sw, "link", "add", BRIDGE, "type", "bridge"])?;
        self.ip(&["-n", &sw, "link", "set", BRIDGE, "up"])?;
        for rank in 0..self.nodes {
            let ns = self.node_namespace(rank);
            let port = format!("n{rank}");
            let addr = format!("{}/{}", node_ip(rank), SUBNET.1);
            self.add_namespace(&ns)?;
            // Created inside the switch namespace, with the peer put straight into the node's:
            // neither end ever exists in the launcher's namespace.
            self.ip(&[
                "-n",
                &sw,
                "link",
                "add",
                &port,
                "type",
                "veth",
                "peer",
                "name",
                NODE_INTERFACE,
                "netns",
                &ns,
            ])?;
            self.ip(&["-n", &sw, "link", "set", &port, "master", BRIDGE, "up"])?;
            self.ip(&["-n", &ns, "addr", "add", &addr, "dev", NODE_INTERFACE])?;
            self.ip(&["-n", &ns, "link", "set", NODE_INTERFACE, "up"])?;
            self.ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            if let Some(rate) = self.rate(rank) {
                self.shape(&ns, NODE_INTERFACE, rate)?;
                self.shape(&sw, &port, rate)?;
            }
        }
        Ok(())
    }

    fn add_namespace(&mut self, name: &str) -> anyhow::Result<()> {
        self.ip(&["netns", "add", name])?;
        self.created.push(name.to_owned());
        Ok(())
    }

    fn ip(&self, args: &[&str]) -> anyhow::Result<()> {
        run_tool(&self.tools.ip, args).map(drop)
    }

    /// A token bucket as the root qdisc of `dev` in `ns`.
    fn shape(&self, ns: &str, dev: &str, rate: Rate) -> anyhow::Result<()> {
        let tc = self
            .tools
            .tc
            .as_deref()
            .context("bandwidth shaping needs `tc`")?;
        let (rate, burst) = (
            format!("{}bit", rate.bits_per_second()),
            rate.burst_bytes().to_string(),
        );
        run_tool(
            tc,
            &[
                "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", &rate, "burst",
                &burst, "latency", TBF_QUEUE,
            ],
        )
        .map(drop)
    }

    /// Number of nodes.
    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    /// The shaped bandwidth, if any.
    pub fn bandwidth(&self) -> Option<Rate> {
        self.bandwidth
    }

    /// The rate node `rank`'s link is shaped to: its override, else [`Cluster::bandwidth`].
    pub fn rate(&self, rank: u32) -> Option<Rate> {
        rate_of(&self.node_bandwidth, self.bandwidth, rank)
    }

    /// `roam-<pid>-<seq>`: every namespace of this run starts with it.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespace holding the bridge.
    pub fn switch_namespace(&self) -> String {
        format!("{}-sw", self.prefix)
    }

    /// Node `rank`'s namespace.
    pub fn node_namespace(&self, rank: u32) -> String {
        format!("{}-n{rank}", self.prefix)
    }

    /// The coordinator address: node 0's address and [`COORDINATOR_PORT`].
    pub fn coordinator(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(node_ip(0), COORDINATOR_PORT))
    }

    /// A command that runs `program` inside node `rank`'s namespace (`ip netns exec`, which
    /// execs the program in place, so the child's pid is the program's); add its arguments.
    pub fn command(&self, rank: u32, program: &OsStr) -> Command {
        let mut cmd = Command::new(&self.tools.ip);
        cmd.args(["netns", "exec"])
            .arg(self.node_namespace(rank))
            .arg(program);
        cmd
    }

    /// What the launcher tells the user about the topology.
    pub fn describe(&self) -> String {
        let last = self.nodes - 1;
        let (nodes, addrs) = if last == 0 {
            (self.node_namespace(0), node_ip(0).to_string())
        } else {
            (
                format!("{}..n{last}", self.node_namespace(0)),
                format!("{}..{}", node_ip(0), node_ip(last)),
            )
        };
        let overrides = |f: fn(&NodeRate) -> String| {
            let v: Vec<String> = self.node_bandwidth.iter().map(f).collect();
            v.join(", ")
        };
        let shaping = match (self.bandwidth, self.node_bandwidth.is_empty()) {
            (None, true) => String::new(),
            (Some(r), true) => format!(", tbf {r} each way on every link"),
            (Some(r), false) => format!(
                ", tbf {r} each way on every link but {}",
                overrides(|n| format!("{} on n{}", n.rate, n.rank))
            ),
            (None, false) => format!(
                ", tbf each way only on the links of {}",
                overrides(|n| format!("n{} ({})", n.rank, n.rate))
            ),
        };
        format!(
            "network namespaces {nodes} ({addrs}/{}) on a bridge in {}{shaping}",
            SUBNET.1,
            self.switch_namespace()
        )
    }

    /// Deletes every namespace of this run, first killing whatever still runs inside them;
    /// returns one message per problem (empty: all gone). Calling it again does nothing.
    pub fn destroy(&mut self) -> Vec<String> {
        // Nodes first (their veths take the switch ports along), then the switch.
        let names: Vec<String> = self.created.drain(..).rev().collect();
        match delete_namespaces(&self.tools.ip, &names) {
            Ok(()) => Vec::new(),
            Err(problems) => problems,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Only reached with namespaces left on an error path or a panic; the normal path
        // destroys explicitly and reports through the launcher.
        for problem in self.destroy() {
            eprintln!("[launch] network namespace cleanup: {problem}");
        }
    }
}

/// Kills every process inside the namespaces, then deletes them; all are attempted.
fn delete_namespaces(ip: &Path, names: &[String]) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let paths: Vec<PathBuf> = names.iter().map(|n| Path::new(NETNS_DIR).join(n)).collect();
    kill_processes_in(&paths);
    for (name, path) in names.iter().zip(&paths) {
        if let Err(e) = run_tool(ip, &["netns", "del", name]) {
            problems.push(format!("{e:#}"));
        } else if path.exists() {
            problems.push(format!(
                "{} still exists after `ip netns del`",
                path.display()
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The (device, inode) identity of a network namespace file.
fn namespace_id(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// SIGKILLs every process whose network namespace is one of `namespaces` (bind-mounted
/// namespace files); returns how many. Each pid is pinned with a pidfd and checked again
/// before the signal, so a pid reused meanwhile by an unrelated process is never hit.
fn kill_processes_in(namespaces: &[PathBuf]) -> usize {
    let ids: HashSet<(u64, u64)> = namespaces.iter().filter_map(|p| namespace_id(p)).collect();
    if ids.is_empty() {
        return 0;
    }
    let Ok(proc_dir) = fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = 0;
    for entry in proc_dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let ns_file = entry.path().join("ns/net");
        if !namespace_id(&ns_file).is_some_and(|id| ids.contains(&id)) {
            continue;
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let Ok(fd) = libc::c_int::try_from(fd) else {
            continue;
        };
        if fd < 0 {
            continue;
        }
        // The pidfd pins the pid: if the process still is in the namespace now, it is the one.
        if namespace_id(&ns_file).is_some_and(|id| ids.contains(&id)) {
            // SAFETY: fd is the pidfd opened above; a null siginfo means a plain kill.
            let sent = unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd,
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            };
            killed += usize::from(sent == 0);
        }
        // SAFETY: fd is ours and closed exactly once.
        unsafe {
            libc::close(fd);
        }
    }
    killed
}

/// The launcher pid in a namespace name of this module (`roam-<pid>-<seq>-<role>`).
/// The launcher pid in a name of this scheme (`roam-<pid>-<seq>-<role>`); the cgroups of
/// `--slow-node` share the scheme.
pub(crate) fn launcher_pid(name: &str) -> Option<libc::pid_t> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let mut parts = rest.splitn(3, '-');
    let pid = parts.next()?;
    let seq = parts.next()?;
    let role = parts.next()?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(seq) && !role.is_empty())
        .then(|| pid.parse().ok())
        .flatten()
}

/// Whether process `pid` exists (owned by anyone).
pub(crate) fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks whether the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io_errno() == libc::EPERM
}

fn io_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Deletes namespaces of this naming scheme whose launcher process no longer exists (one
/// killed with SIGKILL cannot clean up after itself). Returns the names removed and the
/// problems met. Namespaces of live launchers, including this process, are left alone.
pub fn remove_stale(tools: &Tools) -> (Vec<String>, Vec<String>) {
    let Ok(dir) = fs::read_dir(NETNS_DIR) else {
        return (Vec::new(), Vec::new());
    };
    let mut stale: Vec<String> = dir
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| launcher_pid(name).is_some_and(|pid| pid > 0 && !alive(pid)))
        .collect();
    stale.sort();
    match delete_namespaces(&tools.ip, &stale) {
        Ok(()) => (stale, Vec::new()),
        Err(problems) => (stale, problems),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_addresses_fill_the_subnet() {
        assert_eq!(node_ip(0), Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(node_ip(254), Ipv4Addr::new(10, 77, 0, 255));
        assert_eq!(node_ip(255), Ipv4Addr::new(10, 77, 1, 0));
        assert_eq!(node_ip(MAX_NODES - 1), Ipv4Addr::new(10, 77, 4, 0));
    }

    #[test]
    fn stale_names_are_recognised_by_their_launcher_pid() {
        assert_eq!(launcher_pid("roam-123-0-sw"), Some(123));
        assert_eq!(launcher_pid("roam-123-4-n17"), Some(123));
        assert_eq!(launcher_pid("roam-123-4-probe"), Some(123));
        for other in [
            "roam-123-sw",
            "roam-x-0-sw",
            "roam-1-2-",
            "psh1",
            "roam--1-sw",
            "xroam-1-2-sw",
        ] {
            assert_eq!(launcher_pid(other), None, "{other}");
        }
        assert!(alive(i32::try_from(std::process::id()).unwrap()));
    }

    #[test]
    fn programs_are_found_like_command_does() {
        assert!(find_program(OsStr::new("sh"), false).is_some());
        assert!(find_program(OsStr::new("/bin/sh"), false).is_some());
        assert!(find_program(OsStr::new("roam-no-such-program"), true).is_none());
        assert!(find_program(OsStr::new("/nonexistent/sh"), false).is_none());
    }
}
