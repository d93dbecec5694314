# The front door. Logic lives in scripts/; recipes stay one line.
.PHONY: run test bench bench-compare lint fuzz build fmt

run: ## Build the web UI and the release binary, then start weft with embedded storage in ./weft-data
	bash scripts/build_ui.sh && cargo build --release -p weft-server && ./target/release/weft

test: ## Install what the tests need and run every test (unit, integration, real clients)
	bash scripts/test.sh

bench: ## Throughput, memory, disk and latency benchmarks (see BENCHMARKS.md)
	bash scripts/bench.sh

bench-compare: ## The same benchmarks for BASE=<rev> (default HEAD~1) and this tree, side by side in one run
	bash scripts/bench_compare.sh

lint: ## rustfmt and clippy, warnings are errors
	bash scripts/lint.sh

fuzz: ## Every cargo-fuzz target for FUZZ_SECONDS (default 60) each; needs a nightly toolchain
	bash scripts/fuzz.sh

build:
	bash scripts/build_ui.sh && cargo build --release -p weft-server

fmt:
	cargo fmt --all
