//! `kiln models`: the catalogue as a table, with what is cached.

use indicatif::HumanBytes;
use kiln_catalog::{catalog, ModelStatus, DEFAULT_MODEL};

use super::GlobalArgs;

/// Arguments of `kiln models`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kiln models`: prints the catalogue with sizes and cache state.
pub fn run(global: &GlobalArgs, _args: Args) -> anyhow::Result<()> {
    let cache = global.cache()?;
    let mut rows = vec![["NAME", "TASK", "ARCH", "SIZE", "CACHED", "ALIASES"].map(String::from)];
    for spec in catalog::all() {
        let cached = match cache.status(spec) {
            ModelStatus::Present => "yes",
            ModelStatus::Missing => "no",
            ModelStatus::Partial => "partial",
        };
        rows.push([
            spec.name.to_owned(),
            spec.task.to_string(),
            spec.architecture.to_owned(),
            HumanBytes(spec.total_size()).to_string(),
            cached.to_owned(),
            spec.aliases.join(", "),
        ]);
    }
    print!("{}", render_table(&rows));
    println!(
        "\ndefault model: {DEFAULT_MODEL}; cache: {}",
        cache.root().join("models").display()
    );
    Ok(())
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
fn render_table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                if i + 1 == N {
                    cell.clone()
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::render_table;

    #[test]
    fn table_columns_align() {
        let rows = [["a", "bb", "c"], ["ccc", "d", "e"]].map(|r| r.map(String::from));
        assert_eq!(render_table(&rows), "a    bb  c\nccc  d   e\n");
    }
}
