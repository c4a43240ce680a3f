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
//! so the launcher sets the transport's user-space emulation (`ROAM_EMULATE_LATENCY_US`).
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
use std::fmt;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
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
/// Smallest token-bucket burst, in bytes (well above one MTU-sized packet).
const MIN_BURST: u64 = 32 * 1024;
/// Where to look for `ip` and `tc` besides `PATH` (sbin is often missing from a user's PATH).
const EXTRA_TOOL_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A named network profile (`--profile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Profile {
    /// Nodes talk over 127.0.0.1, unshaped; latency only if --latency-us is given.
    Loopback,
    /// Network namespaces, 10 Gbit/s per node link and direction, 50 µs one-way latency.
    #[value(name = "10gbe")]
    TenGbe,
    /// Network namespaces, 1 Gbit/s per node link and direction, 100 µs one-way latency.
    #[value(name = "1gbe")]
    OneGbe,
    /// --bandwidth RATE (implies namespaces) and --latency-us as given.
    Custom,
}

impl Profile {
    /// Every profile, in the order of the documentation.
    pub const ALL: [Self; 4] = [Self::Loopback, Self::TenGbe, Self::OneGbe, Self::Custom];

    /// The profile's name on the command line and in [`ROAM_NETWORK_PROFILE`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::TenGbe => "10gbe",
            Self::OneGbe => "1gbe",
            Self::Custom => "custom",
        }
    }

    /// The link bandwidth the profile stands for, if it fixes one.
    pub fn bandwidth(self) -> Option<Rate> {
        match self {
            Self::TenGbe => Some(Rate::from_bits_per_second(10_000_000_000)),
            Self::OneGbe => Some(Rate::from_bits_per_second(1_000_000_000)),
            Self::Loopback | Self::Custom => None,
        }
    }

    /// The one-way latency (µs) the profile emulates unless `--latency-us` overrides it.
    pub fn latency_us(self) -> Option<u64> {
        match self {
            Self::TenGbe => Some(50),
            Self::OneGbe => Some(100),
            Self::Loopback | Self::Custom => None,
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Profile {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        let s = s.trim();
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|p| p.name()).collect();
                anyhow!(
                    "unknown network profile {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// A link rate, parsed from and passed to `tc` (`10gbit`, `1gbit`, `500mbit`, `125mbps`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(u64);

impl Rate {
    /// Smallest accepted rate: 8 kbit/s.
    pub const MIN: Self = Self(8_000);
    /// Largest accepted rate: 1 Tbit/s.
    pub const MAX: Self = Self(1_000_000_000_000);

    /// A rate of `bits` bits per second (clamped to [`Rate::MIN`]..=[`Rate::MAX`]).
    pub fn from_bits_per_second(bits: u64) -> Self {
        Self(bits.clamp(Self::MIN.0, Self::MAX.0))
    }

    /// Bits per second.
    pub fn bits_per_second(self) -> u64 {
        self.0
    }

    /// The token bucket's burst: one millisecond at this rate, at least 32 KiB.
    pub fn burst_bytes(self) -> u64 {
        (self.0 / 8 / 1000).max(MIN_BURST)
    }
}

impl fmt::Display for Rate {
    /// The largest exact `tc` unit: `10gbit`, `1gbit`, `500mbit`, `64kbit`, `12345bit`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [
            ("tbit", 1_000_000_000_000),
            ("gbit", 1_000_000_000),
            ("mbit", 1_000_000),
            ("kbit", 1_000),
        ];
        for (unit, scale) in UNITS {
            if self.0.is_multiple_of(scale) {
                return write!(f, "{}{unit}", self.0 / scale);
            }
        }
        write!(f, "{}bit", self.0)
    }
}

impl FromStr for Rate {
    type Err = anyhow::Error;

    /// `tc` rate syntax: a number (fractions allowed) and a unit; a bare number is bits/s.
    /// Units `bit kbit mbit gbit tbit` (SI, bits), `bps kbps mbps gbps tbps` (SI, bytes), and the
    /// IEC forms `kibit mibit gibit tibit kibps mibps gibps tibps`; case does not matter.
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let text = s.trim().to_ascii_lowercase();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let scale: f64 = match unit {
            "" | "bit" => 1.0,
            "kbit" => 1e3,
            "mbit" => 1e6,
            "gbit" => 1e9,
            "tbit" => 1e12,
            "kibit" => 1024.0,
            "mibit" => 1024.0 * 1024.0,
            "gibit" => 1024.0 * 1024.0 * 1024.0,
            "tibit" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            "bps" => 8.0,
            "kbps" => 8e3,
            "mbps" => 8e6,
            "gbps" => 8e9,
            "tbps" => 8e12,
            "kibps" => 8.0 * 1024.0,
            "mibps" => 8.0 * 1024.0 * 1024.0,
            "gibps" => 8.0 * 1024.0 * 1024.0 * 1024.0,
            "tibps" => 8.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
            _ => bail!(
                "bad rate {s:?}: unknown unit {unit:?} (use tc syntax such as 10gbit, 1gbit, \
                 500mbit or 125mbps)"
            ),
        };
        let value: f64 = number
            .parse()
            .map_err(|_| anyhow!("bad rate {s:?}: expected a number and a unit, e.g. 10gbit"))?;
        let bits = (value * scale).round();
        ensure!(
            bits >= Self::MIN.0 as f64 && bits <= Self::MAX.0 as f64,
            "rate {s:?} is out of range: use {} to {}",
            Self::MIN,
            Self::MAX
        );
        Ok(Self(bits as u64))
    }
}

/// One node's own link rate (`--node-bandwidth RANK:RATE`), overriding `--bandwidth` (or the
/// profile's rate) for that rank's link, both directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeRate {
    /// The node whose link is shaped.
    pub rank: u32,
    /// Its per-direction rate.
    pub rate: Rate,
}

impl fmt::Display for NodeRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.rank, self.rate)
    }
}

impl FromStr for NodeRate {
    type Err = anyhow::Error;

    /// `RANK:RATE`, the rate in `tc` syntax as for [`Rate`]: `1:250mbit`.
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (rank, rate) = s.split_once(':').ok_or_else(|| {
            anyhow!("bad node bandwidth {s:?}: expected RANK:RATE, e.g. 1:250mbit")
        })?;
        let rank = rank.trim().parse().map_err(|_| {
            anyhow!("bad node bandwidth {s:?}: RANK must be a node number, e.g. 1:250mbit")
        })?;
        let rate = rate
            .parse()
            .with_context(|| format!("bad node bandwidth {s:?}"))?;
        Ok(Self { rank, rate })
    }
}

/// Checks `--node-bandwidth` against the run: every rank below `nodes`, none given twice.
pub fn check_node_rates(specs: &[NodeRate], nodes: u32) -> anyhow::Result<()> {
    let mut seen = HashSet::new();
    for spec in specs {
        ensure!(
            spec.rank < nodes,
            "--node-bandwidth {spec}: rank {} is out of range for --nodes {nodes} (ranks are \
             0..={})",
            spec.rank,
            nodes.saturating_sub(1)
        );
        ensure!(
            seen.insert(spec.rank),
            "--node-bandwidth names rank {} twice; give one rate per rank",
            spec.rank
        );
    }
    Ok(())
}

/// The network a launch runs on, resolved from `--netns`, `--profile`, `--bandwidth`,
/// `--node-bandwidth` and `--latency-us`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Network {
    /// The profile, as recorded in [`ROAM_NETWORK_PROFILE`].
    pub profile: Profile,
    /// Whether every node gets its own network namespace.
    pub netns: bool,
    /// Per-direction bandwidth of each node link (only with namespaces).
    pub bandwidth: Option<Rate>,
    /// Per-rank overrides of `bandwidth` (only with namespaces), sorted by rank.
    pub node_bandwidth: Vec<NodeRate>,
    /// One-way latency the transport emulates, in µs (exported as `ROAM_EMULATE_LATENCY_US`).
    pub latency_us: Option<u64>,
}

impl Network {
    /// Loopback, no shaping, no emulated latency: what `roam launch` does without options.
    pub const LOOPBACK: Self = Self {
        profile: Profile::Loopback,
        netns: false,
        bandwidth: None,
        node_bandwidth: Vec::new(),
        latency_us: None,
    };

    /// Resolves the launcher's options.
    ///
    /// - No `--profile`: `custom` if `--netns`, `--bandwidth` or `--node-bandwidth` is given,
    ///   else `loopback`.
    /// - `loopback` cannot be combined with `--netns`, `--bandwidth` or `--node-bandwidth`.
    /// - `10gbe` and `1gbe` imply namespaces (their bandwidth needs them) and fix the bandwidth;
    ///   `--latency-us` overrides their latency, `--node-bandwidth` the rate of single links.
    /// - `custom` uses namespaces with `--netns`, `--bandwidth` or `--node-bandwidth` (shaping
    ///   needs them), and the latency given (none by default). Links that neither
    ///   `--bandwidth` nor `--node-bandwidth` covers stay unshaped.
    ///
    /// The ranks of `node_bandwidth` are checked against the run by [`check_node_rates`].
    pub fn resolve(
        netns: bool,
        profile: Option<Profile>,
        bandwidth: Option<Rate>,
        node_bandwidth: &[NodeRate],
        latency_us: Option<u64>,
    ) -> anyhow::Result<Self> {
        let mut node_bandwidth = node_bandwidth.to_vec();
        node_bandwidth.sort_by_key(|n| n.rank);
        let shaped = bandwidth.is_some() || !node_bandwidth.is_empty();
        let profile = profile.unwrap_or(if netns || shaped {
            Profile::Custom
        } else {
            Profile::Loopback
        });
        match profile {
            Profile::Loopback => {
                ensure!(
                    !netns,
                    "--profile loopback runs every node on 127.0.0.1 and cannot be combined with \
                     --netns; use --netns alone (or --profile custom --netns) for unshaped \
                     namespaces"
                );
                ensure!(
                    bandwidth.is_none(),
                    "--bandwidth needs network namespaces: use --profile custom --bandwidth RATE \
                     (or --profile 10gbe / 1gbe)"
                );
                ensure!(
                    node_bandwidth.is_empty(),
                    "--node-bandwidth needs network namespaces: use --profile custom (or 10gbe \
                     / 1gbe) with --node-bandwidth RANK:RATE"
                );
                Ok(Self {
                    latency_us,
                    ..Self::LOOPBACK
                })
            }
            Profile::TenGbe | Profile::OneGbe => {
                if let Some(rate) = bandwidth {
                    bail!(
                        "--profile {profile} fixes the bandwidth at {}; for {rate} use \
                         --profile custom --bandwidth {rate}",
                        profile
                            .bandwidth()
                            .map_or_else(String::new, |r| r.to_string())
                    );
                }
                Ok(Self {
                    profile,
                    netns: true,
                    bandwidth: profile.bandwidth(),
                    node_bandwidth,
                    latency_us: latency_us.or(profile.latency_us()),
                })
            }
            Profile::Custom => Ok(Self {
                profile,
                netns: netns || shaped,
                bandwidth,
                node_bandwidth,
                latency_us,
            }),
        }
    }

    /// One line for the launcher's notice, e.g. `profile 1gbe: 1gbit per link and direction,
    /// 100 µs one-way latency (emulated by the transport)`.
    ///
    /// Per-rank overrides follow the rate, e.g. `1gbit per link and direction, node 1 at
    /// 250mbit`, or `unshaped links except node 1 at 100mbit per direction`.
    pub fn describe(&self) -> String {
        let overrides = self
            .node_bandwidth
            .iter()
            .map(|n| format!("node {} at {}", n.rank, n.rate))
            .collect::<Vec<_>>()
            .join(", ");
        let bandwidth = match (self.netns, self.bandwidth, overrides.is_empty()) {
            (false, _, _) => "loopback".to_owned(),
            (true, None, true) => "unshaped links".to_owned(),
            (true, None, false) => format!("unshaped links except {overrides} per direction"),
            (true, Some(r), true) => format!("{r} per link and direction"),
            (true, Some(r), false) => format!("{r} per link and direction, {overrides}"),
        };
        let latency = match self.latency_us {
            None | Some(0) => "no added latency".to_owned(),
            Some(l) => format!("{l} µs one-way latency (emulated by the transport)"),
        };
        format!("profile {}: {bandwidth}, {latency}", self.profile)
    }

    /// The per-direction rate of node `rank`'s link: its override, else the common rate.
    pub fn rate(&self, rank: u32) -> Option<Rate> {
        rate_of(&self.node_bandwidth, self.bandwidth, rank)
    }
}

/// Node `rank`'s link rate: its entry in `overrides`, else `common`.
fn rate_of(overrides: &[NodeRate], common: Option<Rate>, rank: u32) -> Option<Rate> {
    overrides
        .iter()
        .find(|n| n.rank == rank)
        .map(|n| n.rate)
        .or(common)
}

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
    fn profiles_parse_by_name_and_carry_their_defaults() {
        for p in Profile::ALL {
            assert_eq!(p.name().parse::<Profile>().unwrap(), p);
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!("10GbE".parse::<Profile>().unwrap(), Profile::TenGbe);
        let err = "100gbe".parse::<Profile>().unwrap_err().to_string();
        assert!(err.contains("loopback, 10gbe, 1gbe, custom"), "{err}");
        assert_eq!(
            Profile::TenGbe.bandwidth().map(Rate::bits_per_second),
            Some(10_000_000_000)
        );
        assert_eq!(Profile::TenGbe.latency_us(), Some(50));
        assert_eq!(
            Profile::OneGbe.bandwidth().map(Rate::bits_per_second),
            Some(1_000_000_000)
        );
        assert_eq!(Profile::OneGbe.latency_us(), Some(100));
        assert_eq!(Profile::Loopback.bandwidth(), None);
        assert_eq!(Profile::Custom.latency_us(), None);
    }

    #[test]
    fn clap_names_match_the_profile_names() {
        use clap::ValueEnum;
        for p in Profile::ALL {
            assert_eq!(p.to_possible_value().unwrap().get_name(), p.name());
        }
    }

    #[test]
    fn rates_use_tc_syntax() {
        let bits = |s: &str| s.parse::<Rate>().unwrap().bits_per_second();
        assert_eq!(bits("10gbit"), 10_000_000_000);
        assert_eq!(bits("1Gbit"), 1_000_000_000);
        assert_eq!(bits("2.5gbit"), 2_500_000_000);
        assert_eq!(bits("500mbit"), 500_000_000);
        assert_eq!(bits("125mbps"), 1_000_000_000);
        assert_eq!(bits("1mibit"), 1 << 20);
        assert_eq!(bits("64kbit"), 64_000);
        assert_eq!(bits("100000"), 100_000);
        assert_eq!(bits(" 1gbit "), 1_000_000_000);
        for bad in [
            "", "gbit", "10 gbit", "10gb", "1..0gbit", "-1gbit", "1bit", "2tbit",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad:?} parsed");
        }
        for (text, shown) in [
            ("10gbit", "10gbit"),
            ("1000mbit", "1gbit"),
            ("2.5gbit", "2500mbit"),
            ("125mbps", "1gbit"),
            ("1mibit", "1048576bit"),
        ] {
            assert_eq!(text.parse::<Rate>().unwrap().to_string(), shown);
        }
        assert_eq!("1gbit".parse::<Rate>().unwrap().burst_bytes(), 125_000);
        assert_eq!("10gbit".parse::<Rate>().unwrap().burst_bytes(), 1_250_000);
        assert_eq!("1mbit".parse::<Rate>().unwrap().burst_bytes(), MIN_BURST);
    }

    #[test]
    fn options_resolve_to_a_network() {
        let gbit = |g: u64| Some(Rate::from_bits_per_second(g * 1_000_000_000));
        let r = |netns, profile, bandwidth, latency_us| {
            Network::resolve(netns, profile, bandwidth, &[], latency_us)
        };
        assert_eq!(r(false, None, None, None).unwrap(), Network::LOOPBACK);
        assert_eq!(
            r(false, None, None, Some(40)).unwrap(),
            Network {
                latency_us: Some(40),
                ..Network::LOOPBACK
            }
        );
        assert_eq!(
            r(false, Some(Profile::OneGbe), None, None).unwrap(),
            Network {
                profile: Profile::OneGbe,
                netns: true,
                bandwidth: gbit(1),
                node_bandwidth: Vec::new(),
                latency_us: Some(100)
            }
        );
        let ten = r(true, Some(Profile::TenGbe), None, Some(20)).unwrap();
        assert_eq!(
            (ten.netns, ten.bandwidth, ten.latency_us),
            (true, gbit(10), Some(20))
        );
        assert!(r(false, Some(Profile::TenGbe), gbit(5), None).is_err());
        // Custom: namespaces with --netns or --bandwidth.
        let custom = r(false, None, gbit(5), Some(30)).unwrap();
        assert_eq!(
            custom,
            Network {
                profile: Profile::Custom,
                netns: true,
                bandwidth: gbit(5),
                node_bandwidth: Vec::new(),
                latency_us: Some(30)
            }
        );
        let plain = r(true, None, None, None).unwrap();
        assert_eq!((plain.profile, plain.netns), (Profile::Custom, true));
        let latency_only = r(false, Some(Profile::Custom), None, Some(7)).unwrap();
        assert_eq!(
            (latency_only.netns, latency_only.latency_us),
            (false, Some(7))
        );
        // Loopback refuses what it cannot do.
        assert!(r(true, Some(Profile::Loopback), None, None).is_err());
        assert!(r(false, Some(Profile::Loopback), gbit(1), None).is_err());
    }

    #[test]
    fn node_rates_parse_resolve_and_are_checked_against_the_run() {
        let spec = |s: &str| s.parse::<NodeRate>().unwrap();
        assert_eq!(
            spec("1:250mbit"),
            NodeRate {
                rank: 1,
                rate: Rate::from_bits_per_second(250_000_000)
            }
        );
        assert_eq!(spec(" 3 : 1Gbit ").to_string(), "3:1gbit");
        for bad in [
            "", "1", "1:", ":1gbit", "x:1gbit", "-1:1gbit", "1:fast", "1:2tbit",
        ] {
            let e = bad.parse::<NodeRate>().unwrap_err();
            assert!(
                format!("{e:#}").contains("bad node bandwidth"),
                "{bad:?}: {e:#}"
            );
        }

        let specs = [spec("2:100mbit"), spec("0:1gbit")];
        assert!(check_node_rates(&specs, 3).is_ok());
        assert!(check_node_rates(&[], 1).is_ok());
        let e = check_node_rates(&specs, 2).unwrap_err().to_string();
        assert!(e.contains("rank 2 is out of range for --nodes 2"), "{e}");
        let e = check_node_rates(&[spec("1:1gbit"), spec("1:2gbit")], 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("names rank 1 twice"), "{e}");

        // Alone: namespaces, custom, only the named links shaped; sorted by rank.
        let net = Network::resolve(false, None, None, &specs, None).unwrap();
        assert_eq!(
            (net.profile, net.netns, net.bandwidth),
            (Profile::Custom, true, None)
        );
        assert_eq!(net.node_bandwidth, [specs[1], specs[0]]);
        assert_eq!(
            (net.rate(0), net.rate(1), net.rate(2)),
            (Some(specs[1].rate), None, Some(specs[0].rate))
        );
        assert_eq!(
            net.describe(),
            "profile custom: unshaped links except node 0 at 1gbit, node 2 at 100mbit per \
             direction, no added latency"
        );
        // Over a profile's rate.
        let one = [spec("1:250mbit")];
        let net = Network::resolve(false, Some(Profile::OneGbe), None, &one, None).unwrap();
        assert_eq!(
            (net.rate(0), net.rate(1)),
            (Profile::OneGbe.bandwidth(), Some(one[0].rate))
        );
        assert!(
            net.describe()
                .starts_with("profile 1gbe: 1gbit per link and direction, node 1 at 250mbit, "),
            "{}",
            net.describe()
        );
        assert!(Network::resolve(false, Some(Profile::Loopback), None, &one, None).is_err());
    }

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
