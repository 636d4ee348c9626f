//! The proxy image of a per-run proxy. One named by `--proxy-image` or
//! `CRACKBOX_IMAGE` must exist. Otherwise the image is this executable's
//! own, `crackbox:<first 12 hex digits of its SHA-256>`, and when missing it
//! is built from this executable with no pull, the way
//! `deploy/build-image.sh --binary` does: a FROM-scratch root file system
//! holding the binary (debug info stripped when `strip` is there), the
//! shared libraries `ldd` names for it, and the few /etc files it needs,
//! imported through bollard. A different crackbox binary gets its own tag,
//! so a stale image is never run; the next run of the same binary reuses it.

use crate::error::{docker_message, docker_status, one_line, RunError};
use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Repository of the images built from crackbox binaries.
pub const REPOSITORY: &str = "crackbox";

/// The proxy image to run: `named` if given (it must exist), else this
/// executable's own, built first when it is missing (said on stderr when
/// `announce`, else only logged: a pool's holder image is built in passing).
pub async fn ensure_proxy_image(docker: &Docker, named: Option<&str>, announce: bool) -> Result<String, RunError> {
    if let Some(named) = named {
        return match present(docker, named).await? {
            true => Ok(named.to_string()),
            false => Err(RunError::ProxyImageMissing(named.to_string())),
        };
    }
    let binary = std::env::current_exe().map_err(|e| RunError::io("finding the crackbox executable", e))?;
    let for_hash = binary.clone();
    let tag = tokio::task::spawn_blocking(move || tag_for(&for_hash))
        .await
        .map_err(|e| RunError::io("hashing the crackbox executable", std::io::Error::other(e)))?
        .map_err(|e| RunError::io("hashing the crackbox executable", e))?;
    let image = format!("{REPOSITORY}:{tag}");
    if !present(docker, &image).await? {
        match announce {
            true => eprintln!(
                "crackbox: building the proxy image {image} from {} (once for this binary)",
                binary.display()
            ),
            false => tracing::debug!(%image, "building the image from this executable"),
        }
        build(docker, &binary, &tag)
            .await
            .map_err(|detail| RunError::ProxyImageBuild {
                tag: image.clone(),
                binary: binary.display().to_string(),
                detail,
            })?;
    }
    Ok(image)
}

async fn present(docker: &Docker, image: &str) -> Result<bool, RunError> {
    match docker.inspect_image(image).await {
        Ok(_) => Ok(true),
        Err(e) if docker_status(&e) == Some(404) => Ok(false),
        Err(e) => Err(RunError::docker("inspecting the proxy image", e)),
    }
}

/// The image tag of the binary at `path`: its SHA-256, 12 hex digits.
pub fn tag_for(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf)? {
            0 => break,
            n => hasher.update(&buf[..n]),
        }
    }
    Ok(hasher.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect())
}

/// Imports the root file system of `binary` as `crackbox:tag`.
async fn build(docker: &Docker, binary: &Path, tag: &str) -> Result<(), String> {
    let binary = binary.to_path_buf();
    let archive = tokio::task::spawn_blocking(move || root_fs(&binary))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let changes = [
        r#"ENTRYPOINT ["/usr/local/bin/crackbox"]"#,
        r#"CMD ["proxy", "serve"]"#,
        "USER 65534:65534",
        "EXPOSE 3128 3129",
    ];
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(REPOSITORY)
        .tag(tag)
        .changes(changes.iter().map(|c| c.to_string()).collect())
        .build();
    let body = bollard::body_full(bytes::Bytes::from(archive));
    let mut progress = docker.create_image(Some(options), Some(body), None);
    while let Some(step) = progress.next().await {
        step.map_err(|e| one_line(&docker_message(&e)))?;
    }
    Ok(())
}

/// The image's root file system as a tar archive.
fn root_fs(binary: &Path) -> std::io::Result<Vec<u8>> {
    let stripped = stripped_copy(binary)?;
    let executable = stripped.as_deref().unwrap_or(binary);
    let mut tar = tar::Builder::new(Vec::new());
    for (dir, mode, owner) in [
        ("usr", 0o755, 0),
        ("usr/local", 0o755, 0),
        ("usr/local/bin", 0o755, 0),
        ("etc", 0o755, 0),
        ("tmp", 0o1777, 0),
        ("run", 0o1777, 0),
        ("var", 0o755, 0),
        ("var/lib", 0o755, 0),
        ("var/lib/crackbox", 0o755, 65534),
    ] {
        append_dir(&mut tar, Path::new(dir), mode, owner)?;
    }
    append_file(&mut tar, "usr/local/bin/crackbox", &std::fs::read(executable)?, 0o755)?;
    append_file(&mut tar, "etc/nsswitch.conf", b"hosts: files dns\n", 0o644)?;
    let passwd = "root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n";
    append_file(&mut tar, "etc/passwd", passwd.as_bytes(), 0o644)?;
    append_file(&mut tar, "etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)?;
    // A dynamically linked binary brings its loader and libraries along,
    // each at the path the loader finds it at (parents first).
    let libraries = shared_libraries(binary)?;
    let inside = |library: &Path| library.strip_prefix("/").unwrap_or(library).to_path_buf();
    let dirs: BTreeSet<PathBuf> = libraries
        .iter()
        .flat_map(|library| {
            inside(library)
                .ancestors()
                .skip(1)
                .map(Path::to_path_buf)
                .collect::<Vec<_>>()
        })
        .filter(|dir| !dir.as_os_str().is_empty())
        .collect();
    for dir in &dirs {
        append_dir(&mut tar, dir, 0o755, 0)?;
    }
    for library in &libraries {
        append_file(
            &mut tar,
            &inside(library).to_string_lossy(),
            &std::fs::read(library)?,
            0o755,
        )?;
    }
    tar.into_inner()
}

/// A copy of `binary` without debug info, when `strip` is installed.
fn stripped_copy(binary: &Path) -> std::io::Result<Option<tempfile::TempPath>> {
    let copy = tempfile::NamedTempFile::new()?.into_temp_path();
    std::fs::copy(binary, &copy)?;
    let stripped = Command::new("strip")
        .arg("--strip-debug")
        .arg(&copy)
        .output()
        .is_ok_and(|out| out.status.success());
    Ok(stripped.then_some(copy))
}

/// The shared libraries (and loader) `ldd` names for `binary`, as the
/// paths the loader finds them at; none for a static binary.
fn shared_libraries(binary: &Path) -> std::io::Result<Vec<PathBuf>> {
    let output = Command::new("ldd").arg(binary).output()?;
    Ok(libraries_in(&String::from_utf8_lossy(&output.stdout)))
}

/// The absolute paths in `ldd` output.
fn libraries_in(ldd: &str) -> Vec<PathBuf> {
    ldd.split_whitespace()
        .filter(|word| word.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

fn append_dir(tar: &mut tar::Builder<Vec<u8>>, path: &Path, mode: u32, owner: u64) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(mode);
    header.set_uid(owner);
    header.set_gid(owner);
    header.set_size(0);
    tar.append_data(&mut header, path, std::io::empty())
}

fn append_file(tar: &mut tar::Builder<Vec<u8>>, path: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(mode);
    header.set_size(bytes.len() as u64);
    tar.append_data(&mut header, path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_loader_and_the_resolved_libraries() {
        let cases: &[(&str, &[&str])] = &[
            ("\tnot a dynamic executable\n", &[]),
            (
                "\tlinux-vdso.so.1 (0x00007ffd)\n\
                 \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f89)\n\
                 \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f89)\n\
                 \t/lib64/ld-linux-x86-64.so.2 (0x00007f89)\n",
                &[
                    "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                    "/lib/x86_64-linux-gnu/libc.so.6",
                    "/lib64/ld-linux-x86-64.so.2",
                ],
            ),
        ];
        for (output, want) in cases {
            let want: Vec<PathBuf> = want.iter().map(PathBuf::from).collect();
            assert_eq!(libraries_in(output), want, "{output}");
        }
    }

    #[test]
    fn the_tag_is_the_content_hash() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
        std::fs::write(&a, b"crackbox one").unwrap();
        std::fs::write(&b, b"crackbox one").unwrap();
        std::fs::write(&c, b"crackbox two").unwrap();
        let tag = tag_for(&a).unwrap();
        assert_eq!(tag.len(), 12);
        assert!(tag.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(tag, tag_for(&b).unwrap());
        assert_ne!(tag, tag_for(&c).unwrap());
    }

    #[test]
    fn the_root_fs_holds_the_binary_its_libraries_and_etc() {
        let binary = std::env::current_exe().unwrap();
        let archive = root_fs(&binary).unwrap();
        let mut tar = tar::Archive::new(archive.as_slice());
        let names: Vec<String> = tar
            .entries()
            .unwrap()
            .map(|entry| {
                entry
                    .unwrap()
                    .path()
                    .unwrap()
                    .display()
                    .to_string()
                    .trim_end_matches('/')
                    .to_string()
            })
            .collect();
        for want in ["usr/local/bin/crackbox", "etc/passwd", "etc/nsswitch.conf", "tmp"] {
            assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
        }
        for library in shared_libraries(&binary).unwrap() {
            let inside = library.strip_prefix("/").unwrap().display().to_string();
            assert!(names.contains(&inside), "{inside} missing: {names:?}");
        }
    }
}
