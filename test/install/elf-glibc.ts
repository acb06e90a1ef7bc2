/**
 * The glibc versions an ELF shared object needs, read from its version-needs section
 * (`.gnu.version_r`, SHT_GNU_verneed): every `GLIBC_x.y[.z]` the dynamic linker will insist on.
 * A few lines of parsing instead of binutils, so it reads a cross-built (arm64) binary on any host.
 * 64-bit little-endian ELF only (linux-x64 and linux-arm64); anything else throws.
 */
import * as fs from 'node:fs';

const SHT_GNU_VERNEED = 0x6ffffffe;

/** Every version name the object needs from any library, e.g. ['GLIBC_2.2.5', 'GLIBC_2.34', 'GLIBCXX_3.4']. */
export function neededVersions(file: string): string[] {
  const b = fs.readFileSync(file);
  if (b.readUInt32BE(0) !== 0x7f454c46) throw new Error(`${file}: not an ELF file`);
  if (b[4] !== 2 || b[5] !== 1) throw new Error(`${file}: only 64-bit little-endian ELF is read here (class ${b[4]}, data ${b[5]})`);
  const shoff = Number(b.readBigUInt64LE(0x28));
  const shentsize = b.readUInt16LE(0x3a);
  const shnum = b.readUInt16LE(0x3c);
  const section = (i: number) => {
    const o = shoff + i * shentsize;
    return { type: b.readUInt32LE(o + 4), offset: Number(b.readBigUInt64LE(o + 0x18)), link: b.readUInt32LE(o + 0x28), info: b.readUInt32LE(o + 0x2c) };
  };
  const cstr = (at: number) => b.toString('latin1', at, b.indexOf(0, at));
  const names: string[] = [];
  for (let i = 0; i < shnum; i++) {
    const s = section(i);
    if (s.type !== SHT_GNU_VERNEED) continue;
    const strtab = section(s.link).offset;
    // sh_info entries of Elf64_Verneed {u16 version, u16 cnt, u32 file, u32 aux, u32 next}, each
    // with `cnt` Elf64_Vernaux {u32 hash, u16 flags, u16 other, u32 name, u32 next}.
    let vn = s.offset;
    for (let n = 0; n < s.info; n++) {
      const cnt = b.readUInt16LE(vn + 2);
      let aux = vn + b.readUInt32LE(vn + 8);
      for (let k = 0; k < cnt; k++) {
        names.push(cstr(strtab + b.readUInt32LE(aux + 8)));
        aux += b.readUInt32LE(aux + 12);
      }
      const next = b.readUInt32LE(vn + 12);
      if (next === 0) break;
      vn += next;
    }
  }
  return names;
}

/** The highest `<prefix>x.y[.z]` needed (prefix `GLIBC_` or `GLIBCXX_`), as [x, y, z], or null for none. */
export function versionFloor(file: string, prefix: 'GLIBC_' | 'GLIBCXX_'): [number, number, number] | null {
  const re = new RegExp(`^${prefix}(\\d+)\\.(\\d+)(?:\\.(\\d+))?$`);
  const versions = neededVersions(file)
    .map((v) => re.exec(v))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)] as [number, number, number]);
  if (versions.length === 0) return null;
  return versions.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]).at(-1)!;
}

/** `2.34` (or `2.2.5`). */
export function versionText(v: readonly number[]): string {
  return v[2] ? v.join('.') : `${v[0]}.${v[1]}`;
}

/** a < b */
export function versionLess(a: readonly number[], b: readonly number[]): boolean {
  for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) < (b[i] ?? 0);
  return false;
}

/**
 * What the README states the Linux prebuilds need: `**linux-x64 (glibc ≥ 2.34)**` per target, and
 * one libstdc++ floor for both, `(GLIBCXX_3.4.30)`.
 */
export function readmeFloors(readme: string): { glibc: Record<string, [number, number, number]>; glibcxx: [number, number, number] | null } {
  const glibc: Record<string, [number, number, number]> = {};
  for (const m of readme.matchAll(/\*\*linux-(x64|arm64) \(glibc ≥ (\d+)\.(\d+)(?:\.(\d+))?\)\*\*/g)) {
    glibc[`linux-${m[1]}`] = [Number(m[2]), Number(m[3]), Number(m[4] ?? 0)];
  }
  const xx = /libstdc\+\+[^`]*`GLIBCXX_(\d+)\.(\d+)\.(\d+)`/.exec(readme);
  return { glibc, glibcxx: xx ? [Number(xx[1]), Number(xx[2]), Number(xx[3])] : null };
}
