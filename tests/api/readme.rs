//! The README's shell examples, run as written against a live server.
//!
//! Which blocks run: every ` ```sh ` block of `README.md` that names
//! `localhost:8080`, the server a reader starts with `cargo run --release`.
//! Blocks that build or start questd (`cargo …`, `./target/…`) or talk to
//! a server of their own on another port name no `localhost:8080` and are
//! not run; a block that names it and also runs `cargo` fails the test, as
//! it could not be run as written (split it: the server in one block, the
//! requests in the next).
//!
//! How they run: in README order, each with `bash -euo pipefail`, against
//! a server of the harness (port 0, fresh database, offline game master)
//! started with the internal key the README starts its server with.
//! `localhost:8080` becomes the test server's address, and `curl` fails on
//! an HTTP error status (`--fail-with-body`), so an example that gets a
//! `415` or a `401` fails and its output says why. The shell variables and
//! functions a block defines (the session id and token a create returns)
//! are handed to the blocks after it, as a reader's shell keeps them.

use std::path::Path;
use std::process::Command;

use crate::common::spawn_offline;

/// The internal key the README's "Other services" example starts its
/// server with (`QUESTD_INTERNAL_API_KEY=s3cret`).
const README_KEY: &str = "s3cret";

/// The address the README's examples reach the server at.
const README_SERVER: &str = "localhost:8080";

/// One ` ```sh ` block: the line of the README it starts on and its text.
struct Block {
    line: usize,
    text: String,
}

/// The ` ```sh ` blocks of a Markdown text, in order.
fn shell_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in markdown.lines().enumerate() {
        match open.as_mut() {
            None if line.trim_end() == "```sh" => {
                open = Some(Block {
                    line: i + 1,
                    text: String::new(),
                });
            }
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(open.take()),
            Some(block) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
        }
    }
    blocks
}

/// The script that runs one block: `curl` failing on HTTP errors, the
/// state earlier blocks left, the block, then the state it leaves (every
/// variable and function bash did not start with) written to `state`.
fn script(block: &str, state: &Path) -> String {
    let state = state.display();
    format!(
        r#"curl() {{ command curl --fail-with-body --max-time 60 "$@"; }}
__base=" $(compgen -v | tr '\n' ' ') $(compgen -A function | tr '\n' ' ') "
source '{state}'
{block}
{{
  for __v in $(compgen -v); do
    case "$__base" in *" $__v "*) ;; *) [[ $__v == __* ]] || declare -p "$__v" ;; esac
  done
  for __f in $(compgen -A function); do
    case "$__base" in *" $__f "*) ;; *) declare -f "$__f" ;; esac
  done
}} > '{state}.next'
mv '{state}.next' '{state}'
"#
    )
}

#[actix_web::test]
async fn the_readme_shell_examples_run_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("QUESTD_INTERNAL_API_KEY={README_KEY} cargo run")),
        "the README starts its server with the key this test gives its own"
    );
    let examples: Vec<Block> = shell_blocks(&readme)
        .into_iter()
        .filter(|b| b.text.contains(README_SERVER))
        .collect();
    // The README's shell tour, `/api/chat` and the tool API at least: a
    // rule that matched nothing would pass without running anything.
    assert!(
        examples.len() >= 3,
        "the README has {} shell blocks naming {README_SERVER}; expected at least 3",
        examples.len()
    );
    for b in &examples {
        assert!(
            !b.text.contains("cargo "),
            "README.md line {}: a block that starts the server and then uses it cannot run as written; \
             give the server its own block:\n{}",
            b.line,
            b.text
        );
    }

    let curl = Command::new("curl").arg("--version").output();
    assert!(
        curl.is_ok_and(|o| o.status.success()),
        "the README's examples need curl, and it does not run here (Debian: apt-get install curl)"
    );

    let app = spawn_offline(|s| s.internal_api_key = Some(README_KEY.into())).await;
    let address = app.base.trim_start_matches("http://").to_owned();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.sh");
    std::fs::write(&state, "").unwrap();

    for b in &examples {
        let text = b.text.replace(README_SERVER, &address);
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script(&text, &state)])
            .current_dir(dir.path())
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "the README's shell block at line {} fails ({}):\n{}\n--- stdout:\n{}\n--- stderr:\n{}",
            b.line,
            out.status,
            b.text,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn shell_blocks_are_read_with_their_lines() {
    let md = "text\n```sh\ncurl a\ncurl b\n```\n```js\nx\n```\n```sh\necho\n```\n";
    let blocks = shell_blocks(md);
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        (blocks[0].line, blocks[0].text.as_str()),
        (2, "curl a\ncurl b\n")
    );
    assert_eq!((blocks[1].line, blocks[1].text.as_str()), (9, "echo\n"));
}
