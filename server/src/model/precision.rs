//! Which graph of a model runs: the fp32 one (vectors equal to sentence-transformers'
//! to 1e-5) or its int8 quantization beside it (`model_int8.onnx`, built by the
//! setup from the fp32 graph; faster where the CPU multiplies int8 in hardware, at a
//! measured cost in quality: see scripts/model/INT8.md).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What the operator asked for (`--precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PrecisionChoice {
    /// The fp32 graph: the reference vectors.
    #[default]
    Fp32,
    /// The int8 graph; the server refuses to start without one.
    Int8,
    /// int8 where the CPU has int8 dot-product instructions (VNNI or AMX) and the
    /// model directory has an int8 graph, fp32 otherwise.
    Auto,
}

/// The precision a model runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Fp32,
    Int8,
}

impl Precision {
    /// The name clients see in Info and in response metadata.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Int8 => "int8",
        }
    }
}

/// The int8 graph's file names, beside the fp32 `model.onnx`, in the order looked for.
const INT8_GRAPHS: [&str; 2] = ["model_int8.onnx", "onnx/model_int8.onnx"];

/// The int8 graph of the model in `dir`, if it has one.
pub fn int8_graph(dir: &Path) -> Option<PathBuf> {
    INT8_GRAPHS.iter().map(|name| dir.join(name)).find(|path| path.is_file())
}

/// A resolved choice: the precision, the graph to load, and why (for the log).
#[derive(Debug, Clone)]
pub struct Resolved {
    pub precision: Precision,
    pub graph: PathBuf,
    pub reason: String,
}

/// Resolves `choice` for the model in `dir` whose fp32 graph is `fp32_graph`.
pub fn resolve(choice: PrecisionChoice, dir: &Path, fp32_graph: &Path, cpu: CpuInt8) -> Result<Resolved> {
    let fp32 = |reason: String| Resolved { precision: Precision::Fp32, graph: fp32_graph.to_path_buf(), reason };
    let int8 = |graph: PathBuf, reason: String| Resolved { precision: Precision::Int8, graph, reason };
    match choice {
        PrecisionChoice::Fp32 => Ok(fp32("--precision fp32".into())),
        PrecisionChoice::Int8 => match int8_graph(dir) {
            Some(graph) => Ok(int8(graph, "--precision int8".into())),
            None => Err(Error::Config(format!(
                "--precision int8: no {} in {} (run `make setup`, which builds it from model.onnx)",
                INT8_GRAPHS[0],
                dir.display()
            ))),
        },
        PrecisionChoice::Auto => match (cpu.instructions(), int8_graph(dir)) {
            (Some(instructions), Some(graph)) => {
                Ok(int8(graph, format!("--precision auto: the CPU has {instructions} and an int8 graph exists")))
            }
            (None, _) => Ok(fp32("--precision auto: the CPU has no VNNI or AMX int8 instructions".into())),
            (Some(_), None) => Ok(fp32(format!("--precision auto: no {} in {}", INT8_GRAPHS[0], dir.display()))),
        },
    }
}

/// The CPU's int8 dot-product instructions, which make the int8 graph worth its
/// quality cost: without them int8 matrix products gain little over fp32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuInt8 {
    pub avx512_vnni: bool,
    pub avx_vnni: bool,
    pub amx_int8: bool,
}

impl CpuInt8 {
    /// What this machine's CPU has.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            CpuInt8 {
                avx512_vnni: std::arch::is_x86_feature_detected!("avx512vnni"),
                avx_vnni: std::arch::is_x86_feature_detected!("avxvnni"),
                // AMX's detection macro is not stable; the kernel's flag list says it.
                amx_int8: linux_cpu_flag("amx_int8"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            CpuInt8::default()
        }
    }

    /// The instructions present, named as /proc/cpuinfo names them; None without any.
    pub fn instructions(self) -> Option<String> {
        let names: Vec<&str> =
            [(self.avx512_vnni, "avx512_vnni"), (self.avx_vnni, "avx_vnni"), (self.amx_int8, "amx_int8")]
                .into_iter()
                .filter_map(|(present, name)| present.then_some(name))
                .collect();
        (!names.is_empty()).then(|| names.join("+"))
    }
}

#[cfg(target_arch = "x86_64")]
fn linux_cpu_flag(flag: &str) -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
        info.lines()
            .find(|line| line.starts_with("flags"))
            .is_some_and(|line| line.split_whitespace().any(|word| word == flag))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_dir(with_int8: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.onnx"), b"fp32").unwrap();
        if with_int8 {
            std::fs::write(dir.path().join("model_int8.onnx"), b"int8").unwrap();
        }
        dir
    }

    const VNNI: CpuInt8 = CpuInt8 { avx512_vnni: true, avx_vnni: false, amx_int8: false };
    const NO_VNNI: CpuInt8 = CpuInt8 { avx512_vnni: false, avx_vnni: false, amx_int8: false };

    #[test]
    fn auto_picks_int8_only_with_vnni_and_an_int8_graph() {
        let with = model_dir(true);
        let without = model_dir(false);
        let fp32_graph = |dir: &tempfile::TempDir| dir.path().join("model.onnx");
        let auto = |dir: &tempfile::TempDir, cpu| resolve(PrecisionChoice::Auto, dir.path(), &fp32_graph(dir), cpu);

        let chosen = auto(&with, VNNI).unwrap();
        assert_eq!(chosen.precision, Precision::Int8);
        assert!(chosen.graph.ends_with("model_int8.onnx"));
        assert!(chosen.reason.contains("avx512_vnni"), "{}", chosen.reason);

        let chosen = auto(&with, NO_VNNI).unwrap();
        assert_eq!((chosen.precision, chosen.graph), (Precision::Fp32, fp32_graph(&with)));
        assert!(chosen.reason.contains("no VNNI"), "{}", chosen.reason);

        let chosen = auto(&without, VNNI).unwrap();
        assert_eq!(chosen.precision, Precision::Fp32);
        assert!(chosen.reason.contains("model_int8.onnx"), "{}", chosen.reason);
    }

    #[test]
    fn explicit_choices_do_not_look_at_the_cpu() {
        let with = model_dir(true);
        let fp32_graph = with.path().join("model.onnx");
        let int8 = resolve(PrecisionChoice::Int8, with.path(), &fp32_graph, NO_VNNI).unwrap();
        assert_eq!(int8.precision, Precision::Int8);
        let fp32 = resolve(PrecisionChoice::Fp32, with.path(), &fp32_graph, VNNI).unwrap();
        assert_eq!((fp32.precision, fp32.graph), (Precision::Fp32, fp32_graph));
    }

    #[test]
    fn int8_without_a_graph_is_a_clear_start_error() {
        let without = model_dir(false);
        let error = resolve(PrecisionChoice::Int8, without.path(), &without.path().join("model.onnx"), VNNI)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--precision int8") && error.contains("model_int8.onnx"), "{error}");
    }

    #[test]
    fn instructions_are_named_as_cpuinfo_names_them() {
        assert_eq!(NO_VNNI.instructions(), None);
        let both = CpuInt8 { avx512_vnni: true, avx_vnni: false, amx_int8: true };
        assert_eq!(both.instructions().as_deref(), Some("avx512_vnni+amx_int8"));
    }
}
