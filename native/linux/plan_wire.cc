// Landlock-mode plans as bytes for the supervision process (plan_wire.h).
// Tests: see plan_wire.h.
#include "plan_wire.h"

#include <string.h>

#include <type_traits>

namespace psb {
namespace {

// A field added to one of these structs must be added to Put/Get below too (or be one that is
// made where the plan is spawned); the sizes are checked on the project's own build (x86_64,
// libstdc++) so that the build stops there until it is.
#if defined(__x86_64__) && defined(__GLIBCXX__)
static_assert(sizeof(LinuxSpawnPlan) == 688, "LinuxSpawnPlan changed: update plan_wire.cc");
static_assert(sizeof(LandlockPlan) == 168, "LandlockPlan changed: update plan_wire.cc");
static_assert(sizeof(SupervisorConfig) == 824, "SupervisorConfig changed: update plan_wire.cc");
static_assert(sizeof(SpareGo) == 144, "SpareGo changed: update plan_wire.cc");
#endif

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  template <typename T>
  void Num(T v) {
    static_assert(std::is_trivially_copyable<T>::value, "numbers and PODs only");
    out_->append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void Str(const std::string& s) {
    Num<uint32_t>(static_cast<uint32_t>(s.size()));
    out_->append(s);
  }
  void Strs(const std::vector<std::string>& v) {
    Num<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const std::string& s : v) Str(s);
  }
  template <typename T>
  void Pods(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable<T>::value, "PODs only");
    Num<uint32_t>(static_cast<uint32_t>(v.size()));
    out_->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  // fds by index into *fds (-1 stays -1).
  void Fds(const std::vector<int>& v, std::vector<int>* fds) {
    Num<uint32_t>(static_cast<uint32_t>(v.size()));
    for (int fd : v) {
      if (fd < 0) {
        Num<int32_t>(-1);
        continue;
      }
      Num<int32_t>(static_cast<int32_t>(fds->size()));
      fds->push_back(fd);
    }
  }

 private:
  std::string* out_;
};

// Every read checks what is left; the first short one makes ok() false for good.
class Reader {
 public:
  explicit Reader(const std::string& in) : p_(in.data()), left_(in.size()) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && left_ == 0; }
  void Fail() { ok_ = false, left_ = 0; }
  template <typename T>
  void Num(T* v) {
    static_assert(std::is_trivially_copyable<T>::value, "numbers and PODs only");
    if (!Take(sizeof *v)) return;
    memcpy(v, p_ - sizeof *v, sizeof *v);
  }
  void Bool(bool* v) {
    uint8_t b = 0;
    Num(&b);
    *v = b != 0;
  }
  void Str(std::string* s) {
    uint32_t n = 0;
    Num(&n);
    if (!Take(n)) return;
    s->assign(p_ - n, n);
  }
  void Strs(std::vector<std::string>* v) {
    uint32_t n = 0;
    Num(&n);
    // Each string takes 4 bytes at least: a count past what is left is garbled, not reserved.
    if (!ok_ || n > left_ / 4) return Fail();
    v->resize(n);
    for (std::string& s : *v) Str(&s);
  }
  template <typename T>
  void Pods(std::vector<T>* v) {
    uint32_t n = 0;
    Num(&n);
    if (!ok_ || n > left_ / sizeof(T)) return Fail();
    v->resize(n);
    if (Take(n * sizeof(T))) memcpy(v->data(), p_ - n * sizeof(T), n * sizeof(T));
  }
  void Fds(std::vector<int>* v, const std::vector<int>& fds) {
    std::vector<int32_t> idx;
    Pods(&idx);
    v->clear();
    for (int32_t k : idx) v->push_back(k >= 0 && static_cast<size_t>(k) < fds.size() ? fds[k] : -1);
  }

 private:
  bool Take(size_t n) {
    if (!ok_ || n > left_) {
      Fail();
      return false;
    }
    p_ += n, left_ -= n;
    return true;
  }
  const char* p_;
  size_t left_;
  bool ok_ = true;
};

// The nested structs, each direction beside the other (the orders must match). Booleans travel
// as one byte.
void Put(Writer& w, bool b) { w.Num<uint8_t>(b ? 1 : 0); }
void Put(Writer& w, const LandlockPlan& l) {
  w.Num<int32_t>(l.abi), w.Num(l.handled_fs), w.Num(l.handled_net), w.Num(l.scoped);
  w.Strs(l.paths), w.Pods(l.path_access), w.Pods(l.path_flags), w.Pods(l.connect_ports);
  Put(w, l.stdio_terminals);
}
void Get(Reader& r, LandlockPlan* l) {
  int32_t abi = 0;
  r.Num(&abi), l->abi = abi;
  r.Num(&l->handled_fs), r.Num(&l->handled_net), r.Num(&l->scoped);
  r.Strs(&l->paths), r.Pods(&l->path_access), r.Pods(&l->path_flags), r.Pods(&l->connect_ports);
  r.Bool(&l->stdio_terminals);
  if (l->path_access.size() != l->paths.size() || l->path_flags.size() != l->paths.size()) r.Fail();
}
void Put(Writer& w, const StatRules& s) {
  Put(w, s.enabled), w.Strs(s.readable), w.Strs(s.deny_read), w.Num<uint64_t>(s.proc_dev);
}
void Get(Reader& r, StatRules* s) {
  uint64_t dev = 0;
  r.Bool(&s->enabled), r.Strs(&s->readable), r.Strs(&s->deny_read), r.Num(&dev);
  s->proc_dev = static_cast<dev_t>(dev);
}

}  // namespace

void EncodePlan(const LinuxSpawnPlan& p, const SupervisorConfig& s, std::string* out, std::vector<int>* fds) {
  out->clear();
  Writer w(out);
  w.Num<uint8_t>(static_cast<uint8_t>(p.mode));
  w.Str(p.file), w.Strs(p.argv), w.Strs(p.envp), w.Str(p.cwd);
  w.Fds(p.stdio, fds);
  Put(w, p.new_net), Put(w, p.share_netns);
  w.Num<uint32_t>(static_cast<uint32_t>(p.mounts.size()));
  for (const MountOp& m : p.mounts) w.Num<uint8_t>(static_cast<uint8_t>(m.kind)), w.Str(m.path), w.Str(m.data), w.Num<int32_t>(m.arg);
  w.Num<int32_t>(p.tmp_slots);
  Put(w, p.landlock), Put(w, p.landlock_plan), Put(w, p.envelope_plan);
  Put(w, p.seccomp), w.Pods(p.seccomp_filter), Put(w, p.seccomp_listener);
  Put(w, p.drop_caps), Put(w, p.setsid), Put(w, p.ctty);
  w.Num(p.pty_cols), w.Num(p.pty_rows), w.Num(p.proxy_port);
  w.Num(p.rlimit_nproc), w.Num(p.rlimit_as), w.Num(p.rlimit_nofile), w.Num(p.trace_process_cap);
  w.Num(p.rlimit_sigpending), w.Num(p.rlimit_msgqueue), w.Num(p.inotify_instances), w.Num(p.inotify_watches);
  w.Str(p.shm_data);
  w.Fds(p.cgroup_fds, fds);
  // The supervisor's inputs (MaterializeSupervisor makes the rest there).
  w.Num(s.proxy_port);
  const MetadataRules& m = s.metadata;
  Put(w, m.enabled), w.Strs(m.writable), w.Strs(m.protect), w.Strs(m.readable), w.Strs(m.deny_read), Put(w, m.list_dirs);
  const PathRules& pr = s.paths;
  Put(w, pr.enabled), w.Strs(pr.writable), w.Strs(pr.carveouts_in), w.Strs(pr.present_only_in), w.Strs(pr.devices_in);
  Put(w, pr.inet_bind);
  Put(w, s.signals.enabled);
  Put(w, s.reads.enabled), w.Num<uint64_t>(s.reads.proc_dev), Put(w, s.reads.names);
  Put(w, s.stats);
  Put(w, s.hide.enabled), w.Strs(s.hide.paths);
  Put(w, s.inotify), w.Num(s.inotify_instances), w.Num(s.inotify_watches);
  w.Str(s.journal_spec.dir), w.Strs(s.journal_spec.roots), w.Strs(s.journal_spec.exclude), w.Num(s.journal_spec.max_bytes);
}

bool DecodePlan(const std::string& in, const std::vector<int>& fds, LinuxSpawnPlan* p, SupervisorConfig* s) {
  Reader r(in);
  uint8_t mode = 0;
  r.Num(&mode);
  if (mode > static_cast<uint8_t>(LinuxMode::kLandlock)) return false;
  p->mode = static_cast<LinuxMode>(mode);
  r.Str(&p->file), r.Strs(&p->argv), r.Strs(&p->envp), r.Str(&p->cwd);
  r.Fds(&p->stdio, fds);
  r.Bool(&p->new_net), r.Bool(&p->share_netns);
  uint32_t mounts = 0;
  r.Num(&mounts);
  for (uint32_t i = 0; i < mounts && r.ok(); ++i) {
    MountOp m;
    uint8_t kind = 0;
    int32_t arg = 0;
    r.Num(&kind), r.Str(&m.path), r.Str(&m.data), r.Num(&arg);
    if (kind > static_cast<uint8_t>(MountOpKind::kStageOverlay)) return false;
    m.kind = static_cast<MountOpKind>(kind), m.arg = arg;
    p->mounts.push_back(std::move(m));
  }
  int32_t tmp_slots = 0;
  r.Num(&tmp_slots), p->tmp_slots = tmp_slots;
  r.Bool(&p->landlock), Get(r, &p->landlock_plan), Get(r, &p->envelope_plan);
  r.Bool(&p->seccomp), r.Pods(&p->seccomp_filter), r.Bool(&p->seccomp_listener);
  r.Bool(&p->drop_caps), r.Bool(&p->setsid), r.Bool(&p->ctty);
  r.Num(&p->pty_cols), r.Num(&p->pty_rows), r.Num(&p->proxy_port);
  r.Num(&p->rlimit_nproc), r.Num(&p->rlimit_as), r.Num(&p->rlimit_nofile), r.Num(&p->trace_process_cap);
  r.Num(&p->rlimit_sigpending), r.Num(&p->rlimit_msgqueue), r.Num(&p->inotify_instances), r.Num(&p->inotify_watches);
  r.Str(&p->shm_data);
  r.Fds(&p->cgroup_fds, fds);
  r.Num(&s->proxy_port);
  MetadataRules& m = s->metadata;
  r.Bool(&m.enabled), r.Strs(&m.writable), r.Strs(&m.protect), r.Strs(&m.readable), r.Strs(&m.deny_read), r.Bool(&m.list_dirs);
  PathRules& pr = s->paths;
  r.Bool(&pr.enabled), r.Strs(&pr.writable), r.Strs(&pr.carveouts_in), r.Strs(&pr.present_only_in), r.Strs(&pr.devices_in);
  r.Bool(&pr.inet_bind);
  r.Bool(&s->signals.enabled);
  uint64_t proc_dev = 0;
  r.Bool(&s->reads.enabled), r.Num(&proc_dev), Get(r, &s->reads.names);
  s->reads.proc_dev = static_cast<dev_t>(proc_dev);
  Get(r, &s->stats);
  r.Bool(&s->hide.enabled), r.Strs(&s->hide.paths);
  r.Bool(&s->inotify), r.Num(&s->inotify_instances), r.Num(&s->inotify_watches);
  r.Str(&s->journal_spec.dir), r.Strs(&s->journal_spec.roots), r.Strs(&s->journal_spec.exclude), r.Num(&s->journal_spec.max_bytes);
  return r.done() && !p->argv.empty();
}

void EncodeGo(const SpareGo& go, std::string* out, std::vector<int>* fds) {
  out->clear();
  Writer w(out);
  w.Str(go.file), w.Strs(go.argv), w.Strs(go.envp), w.Str(go.cwd);
  w.Fds(go.stdio, fds);
  w.Num(go.pty_cols), w.Num(go.pty_rows);
}

bool DecodeGo(const std::string& in, const std::vector<int>& fds, SpareGo* go) {
  Reader r(in);
  r.Str(&go->file), r.Strs(&go->argv), r.Strs(&go->envp), r.Str(&go->cwd);
  r.Fds(&go->stdio, fds);
  r.Num(&go->pty_cols), r.Num(&go->pty_rows);
  return r.done() && !go->argv.empty();
}

}  // namespace psb
