//! Checking a model's function specifications and ordering them.

use std::collections::{BTreeMap, BTreeSet};

use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::DiGraph;
use proto::generation::FunctionSpec;
use proto::job::Plan;

/// Times a refused plan (a cycle, a missing dependency) is asked for again, in the same plan
/// task, before the job fails with the problem.
pub const MAX_REPLANS: u32 = 1;

/// Why a plan cannot be used; the message is quoted to the model on a re-plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the plan has no functions")]
    Empty,
    #[error("function names must be unique; duplicated: {}", .0.join(", "))]
    Duplicates(Vec<String>),
    #[error("function names must be identifiers; invalid: {}", .0.join(", "))]
    InvalidNames(Vec<String>),
    #[error("unknown dependencies: {}", .0.join("; "))]
    UnknownDependencies(Vec<String>),
    #[error("dependency cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    #[error("too many functions: {found} (at most {max})")]
    TooMany { found: usize, max: usize },
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Validates `specs` and orders them so that every function follows its dependencies.
pub fn plan(specs: Vec<FunctionSpec>, max_functions: usize) -> Result<Plan, PlanError> {
    if specs.is_empty() {
        return Err(PlanError::Empty);
    }
    if specs.len() > max_functions {
        return Err(PlanError::TooMany {
            found: specs.len(),
            max: max_functions,
        });
    }
    let invalid: Vec<String> = specs
        .iter()
        .filter(|s| !is_identifier(&s.name))
        .map(|s| format!("{:?}", s.name))
        .collect();
    if !invalid.is_empty() {
        return Err(PlanError::InvalidNames(invalid));
    }
    let mut seen = BTreeSet::new();
    let duplicates: BTreeSet<String> = specs
        .iter()
        .filter(|s| !seen.insert(s.name.clone()))
        .map(|s| s.name.clone())
        .collect();
    if !duplicates.is_empty() {
        return Err(PlanError::Duplicates(duplicates.into_iter().collect()));
    }
    let unknown: Vec<String> = specs
        .iter()
        .flat_map(|s| {
            s.dependencies
                .iter()
                .filter(|d| !seen.contains(*d))
                .map(move |d| format!("{} depends on {d}, which is not in the plan", s.name))
        })
        .collect();
    if !unknown.is_empty() {
        return Err(PlanError::UnknownDependencies(unknown));
    }

    let mut graph = DiGraph::<usize, ()>::new();
    let nodes: Vec<_> = (0..specs.len()).map(|i| graph.add_node(i)).collect();
    let index: BTreeMap<&str, usize> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    for (i, spec) in specs.iter().enumerate() {
        // Deduplicated: a dependency listed twice is still one edge.
        let deps: BTreeSet<&str> = spec.dependencies.iter().map(String::as_str).collect();
        for dep in deps {
            graph.add_edge(nodes[index[dep]], nodes[i], ());
        }
    }
    let order = match toposort(&graph, None) {
        Ok(order) => order,
        Err(_) => {
            // Name a whole cycle, not just one node of it.
            let cycle = tarjan_scc(&graph)
                .into_iter()
                .find(|scc| scc.len() > 1 || graph.contains_edge(scc[0], scc[0]))
                .unwrap_or_default();
            let mut names: Vec<String> = cycle
                .iter()
                .map(|n| specs[graph[*n]].name.clone())
                .collect();
            names.sort();
            if let Some(first) = names.first().cloned() {
                names.push(first);
            }
            return Err(PlanError::Cycle(names));
        }
    };
    let mut dependants: BTreeMap<String, Vec<String>> =
        specs.iter().map(|s| (s.name.clone(), Vec::new())).collect();
    for spec in &specs {
        let deps: BTreeSet<&String> = spec.dependencies.iter().collect();
        for dep in deps {
            dependants
                .get_mut(dep)
                .expect("checked above")
                .push(spec.name.clone());
        }
    }
    let mut ordered: Vec<Option<FunctionSpec>> = specs.into_iter().map(Some).collect();
    let specs = order
        .into_iter()
        .map(|n| ordered[graph[n]].take().expect("each node once"))
        .collect();
    Ok(Plan {
        specs,
        dependants,
        refused: None,
        request_code: None,
    })
}

#[cfg(test)]
mod tests {
    use proto::generation::{Complexity, Output};

    use super::*;

    fn spec(name: &str, deps: &[&str]) -> FunctionSpec {
        FunctionSpec {
            name: name.into(),
            purpose: format!("{name} does its thing"),
            inputs: vec![],
            outputs: Output {
                ty: "int".into(),
                description: "a number".into(),
            },
            dependencies: deps.iter().map(|d| d.to_string()).collect(),
            complexity: Complexity::Simple,
        }
    }

    #[test]
    fn orders_a_diamond_with_dependencies_first() {
        let plan = plan(
            vec![
                spec("d", &["b", "c"]),
                spec("b", &["a"]),
                spec("c", &["a", "a"]),
                spec("a", &[]),
            ],
            16,
        )
        .unwrap();
        let order: Vec<&str> = plan.specs.iter().map(|s| s.name.as_str()).collect();
        let pos = |n: &str| order.iter().position(|o| *o == n).unwrap();
        assert!(pos("a") < pos("b") && pos("a") < pos("c"));
        assert!(pos("b") < pos("d") && pos("c") < pos("d"));
        assert_eq!(
            plan.dependants["a"].len(),
            2,
            "a listed twice by c counts once"
        );
        assert!(plan.dependants["d"].is_empty());
    }

    #[test]
    fn rejections_name_the_problem() {
        assert_eq!(plan(vec![], 16), Err(PlanError::Empty));
        let err = plan(vec![spec("a", &[]), spec("a", &[])], 16).unwrap_err();
        assert_eq!(
            err.to_string(),
            "function names must be unique; duplicated: a"
        );
        let err = plan(vec![spec("a", &["ghost"])], 16).unwrap_err();
        assert!(err.to_string().contains("a depends on ghost"), "{err}");
        let err = plan(
            vec![
                spec("a", &["b"]),
                spec("b", &["c"]),
                spec("c", &["a"]),
                spec("d", &[]),
            ],
            16,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "dependency cycle: a -> b -> c -> a");
        let err = plan(vec![spec("a", &["a"])], 16).unwrap_err();
        assert_eq!(err.to_string(), "dependency cycle: a -> a");
        let err = plan(vec![spec("not valid", &[])], 16).unwrap_err();
        assert!(matches!(err, PlanError::InvalidNames(_)));
        let err = plan((0..3).map(|i| spec(&format!("f{i}"), &[])).collect(), 2).unwrap_err();
        assert!(matches!(err, PlanError::TooMany { found: 3, max: 2 }));
    }
}
