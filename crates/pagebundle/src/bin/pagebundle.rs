//! `pagebundle WEB_DIR OUT_DIR`: the page's release bundle (`pagebundle::build`), run by
//! `scripts/build-web.sh` after the wasm client is built into `WEB_DIR/pkg`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [web, out] = args.as_slice() else {
        eprintln!("usage: pagebundle WEB_DIR OUT_DIR");
        return ExitCode::from(2);
    };
    match pagebundle::build(&PathBuf::from(web), &PathBuf::from(out)) {
        Ok(m) => {
            let bytes: u64 = m.files.values().map(|f| f.bytes).sum();
            println!(
                "{out}: {} files, {bytes} bytes; index.html sha256 {}",
                m.files.len(),
                m.page_sha256()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pagebundle: {e}");
            ExitCode::FAILURE
        }
    }
}
