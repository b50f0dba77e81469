//! What one node says the cluster looks like: its `CLUSTER NODES` reply,
//! parsed. Roles change with failovers and slots with migrations, so the
//! handle asks a live node rather than remembering who serves what.
//!
//! One line per node: `<id> <ip:port@bus> <flags> <primary id or -> <ping>
//! <pong> <epoch> <link> <slot ranges...>`; the flags say `myself`, `master`
//! or `slave`, `fail?` (suspected) or `fail` (agreed). The asking node also
//! lists its own slots being migrated (`[slot->-id]`) or imported
//! (`[slot-<-id]`); those are skipped: the slot still belongs to the node
//! that lists it plainly.

use std::ops::RangeInclusive;

/// One node's view of every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    pub(crate) nodes: Vec<NodeEntry>,
}

/// A node's role: `(its id, its primary's id if it is a replica)`.
pub(crate) type Role<'a> = (&'a str, Option<&'a str>);

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeEntry {
    pub(crate) id: String,
    /// The node that answered.
    pub(crate) myself: bool,
    /// A primary (`master`), or else a replica.
    pub(crate) primary: bool,
    /// Suspected (`fail?`) or agreed (`fail`) to have failed.
    pub(crate) failing: bool,
    /// For a replica, the id of its primary.
    pub(crate) primary_id: Option<String>,
    /// The slots it serves, as listed.
    pub(crate) slots: Vec<RangeInclusive<u16>>,
}

impl Topology {
    /// Parses a `CLUSTER NODES` reply.
    pub(crate) fn parse(text: &str) -> Result<Topology, String> {
        let nodes = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(NodeEntry::parse)
            .collect::<Result<_, _>>()?;
        Ok(Topology { nodes })
    }

    /// The node that answered.
    pub(crate) fn myself(&self) -> Option<&NodeEntry> {
        self.nodes.iter().find(|node| node.myself)
    }

    /// The node with this id.
    pub(crate) fn node(&self, id: &str) -> Option<&NodeEntry> {
        self.nodes.iter().find(|node| node.id == id)
    }

    /// The primary listed with `slot`.
    pub(crate) fn serving(&self, slot: u16) -> Option<&NodeEntry> {
        self.nodes
            .iter()
            .find(|node| node.primary && node.slots.iter().any(|range| range.contains(&slot)))
    }

    /// The primary listed with the most slots of `range`: the one serving a
    /// shard even after a few of its slots were migrated elsewhere.
    pub(crate) fn serving_most(&self, range: &RangeInclusive<u16>) -> Option<&NodeEntry> {
        self.nodes
            .iter()
            .filter(|node| node.primary)
            .map(|node| (node, node.slots_in(range)))
            .filter(|&(_, count)| count > 0)
            .max_by_key(|&(_, count)| count)
            .map(|(node, _)| node)
    }

    /// The replicas of the primary `id`.
    pub(crate) fn replicas_of<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a NodeEntry> {
        self.nodes
            .iter()
            .filter(move |node| node.primary_id.as_deref() == Some(id))
    }

    /// Which primary serves which slots, in slot order: `(first, last, id)`.
    /// Two nodes agree on who serves what when their layouts are equal.
    pub(crate) fn layout(&self) -> Vec<(u16, u16, &str)> {
        let mut layout: Vec<(u16, u16, &str)> = self
            .nodes
            .iter()
            .filter(|node| node.primary)
            .flat_map(|node| {
                let id = node.id.as_str();
                node.slots.iter().map(move |r| (*r.start(), *r.end(), id))
            })
            .collect();
        layout.sort_unstable();
        layout
    }

    /// Every node's role, by id, plus the layout. Two nodes agree on the
    /// whole cluster when their shapes are equal.
    pub(crate) fn shape(&self) -> (Vec<Role<'_>>, Vec<(u16, u16, &str)>) {
        let mut roles: Vec<Role<'_>> = self
            .nodes
            .iter()
            .map(|node| (node.id.as_str(), node.primary_id.as_deref()))
            .collect();
        roles.sort_unstable();
        (roles, self.layout())
    }

    /// What this view lists that `other` does not, and the reverse, role
    /// by role and range by range: the reason two views' shapes differ,
    /// for an error a person can act on.
    pub(crate) fn differences(&self, other: &Topology) -> String {
        let (roles, layout) = self.shape();
        let (their_roles, their_layout) = other.shape();
        let role = |(id, primary): &Role<'_>| match primary {
            Some(primary) => format!("{id} replica of {primary}"),
            None => format!("{id} primary"),
        };
        let range = |(first, last, id): &(u16, u16, &str)| format!("{first}-{last} on {id}");
        let only = |mine: Vec<String>, theirs: &[String]| -> Vec<String> {
            mine.into_iter()
                .filter(|item| !theirs.contains(item))
                .collect()
        };
        let ours: Vec<String> = roles
            .iter()
            .map(role)
            .chain(layout.iter().map(range))
            .collect();
        let theirs: Vec<String> = their_roles
            .iter()
            .map(role)
            .chain(their_layout.iter().map(range))
            .collect();
        format!(
            "it lists [{}] where the other lists [{}]",
            only(ours.clone(), &theirs).join(", "),
            only(theirs, &ours).join(", ")
        )
    }
}

impl NodeEntry {
    fn parse(line: &str) -> Result<NodeEntry, String> {
        let bad = |why: &str| format!("CLUSTER NODES line {line:?}: {why}");
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [
            id,
            _addr,
            flags,
            primary_id,
            _ping,
            _pong,
            _epoch,
            _link,
            slots @ ..,
        ] = fields.as_slice()
        else {
            return Err(bad("fewer than 8 fields"));
        };
        let flags: Vec<&str> = flags.split(',').collect();
        let slots = slots
            .iter()
            .filter(|token| !token.starts_with('['))
            .map(|token| parse_range(token).ok_or_else(|| bad("a bad slot range")))
            .collect::<Result<_, _>>()?;
        Ok(NodeEntry {
            id: (*id).to_owned(),
            myself: flags.contains(&"myself"),
            primary: flags.contains(&"master"),
            failing: flags.contains(&"fail") || flags.contains(&"fail?"),
            primary_id: (*primary_id != "-").then(|| (*primary_id).to_owned()),
            slots,
        })
    }

    /// How many slots of `range` this node is listed with.
    fn slots_in(&self, range: &RangeInclusive<u16>) -> usize {
        self.slots
            .iter()
            .map(|own| {
                let first = *own.start().max(range.start());
                let last = *own.end().min(range.end());
                if first <= last {
                    usize::from(last - first) + 1
                } else {
                    0
                }
            })
            .sum()
    }
}

/// `a-b` or a single slot `a`.
fn parse_range(token: &str) -> Option<RangeInclusive<u16>> {
    let (first, last) = token.split_once('-').unwrap_or((token, token));
    let (first, last) = (first.parse().ok()?, last.parse().ok()?);
    (first <= last).then_some(first..=last)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
d9de 127.0.0.1:7103@7203 slave 81e7 0 1796228884828 1 connected
b751 127.0.0.1:7102@7202 master,fail - 0 1796228884727 3 disconnected 8192-16383
81e7 127.0.0.1:7101@7201 myself,master - 0 0 1 connected 0-8190 8191 [8191->-b751] [5-<-b751]
";

    #[test]
    fn parses_roles_failures_and_plain_slot_ranges() {
        let topology = Topology::parse(NODES).expect("parses");
        let me = topology.myself().expect("myself");
        assert_eq!(me.id, "81e7");
        assert!(me.primary && !me.failing);
        assert_eq!(me.slots, [0..=8190, 8191..=8191]);
        let replica = topology.node("d9de").expect("listed");
        assert!(!replica.primary);
        assert_eq!(replica.primary_id.as_deref(), Some("81e7"));
        assert!(topology.node("b751").expect("listed").failing);
        let replicas: Vec<&str> = topology
            .replicas_of("81e7")
            .map(|node| node.id.as_str())
            .collect();
        assert_eq!(replicas, ["d9de"]);
    }

    #[test]
    fn finds_who_serves_a_slot_and_most_of_a_range() {
        let topology = Topology::parse(NODES).expect("parses");
        assert_eq!(topology.serving(8191).map(|n| n.id.as_str()), Some("81e7"));
        assert_eq!(topology.serving(8192).map(|n| n.id.as_str()), Some("b751"));
        let most = topology.serving_most(&(8000..=16383));
        assert_eq!(most.map(|n| n.id.as_str()), Some("b751"));
        assert_eq!(
            topology.layout(),
            [
                (0, 8190, "81e7"),
                (8191, 8191, "81e7"),
                (8192, 16383, "b751")
            ]
        );
    }

    #[test]
    fn says_which_roles_and_ranges_two_views_differ_on() {
        let ours = Topology::parse(NODES).expect("parses");
        let theirs = Topology::parse(
            "d9de 127.0.0.1:7103@7203 myself,master - 0 0 4 connected\n\
             b751 127.0.0.1:7102@7202 master - 0 0 3 connected 8192-16383\n\
             81e7 127.0.0.1:7101@7201 master - 0 0 1 connected 0-8191\n",
        )
        .expect("parses");
        assert_eq!(
            ours.differences(&theirs),
            "it lists [d9de replica of 81e7, 0-8190 on 81e7, 8191-8191 on 81e7] \
             where the other lists [d9de primary, 0-8191 on 81e7]"
        );
    }

    #[test]
    fn rejects_short_lines_and_bad_ranges() {
        assert!(Topology::parse("abc 127.0.0.1:1@2 master -").is_err());
        assert!(Topology::parse("a b master - 0 0 1 connected 9-3").is_err());
        assert!(Topology::parse("a b master - 0 0 1 connected x").is_err());
    }
}
