//! Prints a crate's sibling imports and their cycles: `cargo run -p
//! tally-layers --example show -- node/src`.
fn main() {
    let Some(src) = std::env::args().nth(1) else {
        eprintln!("usage: show <crate>/src");
        std::process::exit(2);
    };
    match tally_layers::graph(std::path::Path::new(&src)) {
        Ok(graph) => {
            for (parent, edges) in &graph {
                let at = parent.join("::");
                for (from, tos) in edges {
                    let tos: Vec<&str> = tos.iter().map(String::as_str).collect();
                    println!("{at}: {from} -> {}", tos.join(" "));
                }
                for cycle in tally_layers::cycles(edges) {
                    println!("{at}: CYCLE {}", cycle.join(" "));
                }
            }
        }
        Err(e) => {
            eprintln!("{src}: {e}");
            std::process::exit(1);
        }
    }
}
