//! What network `roam launch` emulates, before any namespace exists: the named profiles
//! (`--profile`), rates in `tc` syntax (`--bandwidth`, `--node-bandwidth`), and how the options
//! combine into one [`Network`] (`netns.rs` builds it).
//!
//! Invariants: every option is parsed and every combination checked here, so a bad one is
//! refused with an error naming it before the launcher creates anything.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use anyhow::{Context, anyhow, bail, ensure};

/// Smallest token-bucket burst, in bytes (well above one MTU-sized packet).
pub(super) const MIN_BURST: u64 = 32 * 1024;

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
pub(super) fn rate_of(overrides: &[NodeRate], common: Option<Rate>, rank: u32) -> Option<Rate> {
    overrides
        .iter()
        .find(|n| n.rank == rank)
        .map(|n| n.rate)
        .or(common)
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
}
