package hubmirror

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/hubcache"
)

// Seals. A pass that re-reads every staged file costs what rsync --checksum
// costs, whatever it skips: on a tree of many small files each sample is
// the whole file. A blob of a hub cache is named by its content (LFS blobs
// by their sha256, other files by their git blob sha1), so once a staged
// blob's whole content was proved against its name, and the node's own
// filesystem says the file is the same inode with the same ctime since
// (ledger.Seal), a later pass checks it with one lstat and reads nothing:
// the source's bytes under that name are by definition the ones staged.
//
// Proof comes from content read whole: a small file's bytes (copied from
// memory, then read back at the end of the pass; or compared on a verify
// pass) or,
// under verify = "sha256", the full hash equal to the LFS name. Anything
// else (refs, files that are not blobs, large blobs under sampled
// verification) is sampled on every pass as before. `--stage=force` and
// `starter verify` read content whatever the seal says.

// contentName is the content-addressed name of mirror file rel: its base
// name when it is a blob (REPO/blobs/NAME) named by a hash.
func contentName(rel string) (string, bool) {
	dir, name := filepath.Split(rel)
	if !strings.HasSuffix(dir, "/"+hubcache.Blobs+"/") || !hubcache.IsBlobName(name) {
		return "", false
	}
	return name, true
}

// namedBy reports whether data is what the content-addressed name says:
// sha256 for a 64-digit name, the git blob sha1 for a 40-digit one.
func namedBy(name string, data []byte) bool {
	switch len(name) {
	case 64:
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:]) == name
	case 40:
		h := sha1.New()
		fmt.Fprintf(h, "blob %d\x00", len(data))
		h.Write(data)
		return hex.EncodeToString(h.Sum(nil)) == name
	}
	return false
}

// sealMargin is how much older than the look a file's ctime must be for
// its identity to be sealed. The kernel stamps inodes from a coarse clock
// (one tick, at most 10 ms); a write in the same tick as the last one
// would leave ctime unchanged, so a file changed that recently is checked
// by content again on the next pass instead.
const sealMargin = 100 * time.Millisecond

// sealClock is when a staged file is looked at, for the margin. Tests set
// it: whether a seal is made must not depend on how fast the machine is.
var sealClock = time.Now

// localFS lists the filesystems whose inode identity a seal may rest on:
// local ones, where ctime is the kernel's own. On any other (NFS, SMB,
// FUSE) nothing is sealed and every pass samples.
var localFS = map[int64]bool{
	unix.EXT4_SUPER_MAGIC:      true, // ext2/3/4
	unix.XFS_SUPER_MAGIC:       true,
	unix.BTRFS_SUPER_MAGIC:     true,
	unix.TMPFS_MAGIC:           true,
	unix.F2FS_SUPER_MAGIC:      true,
	unix.OVERLAYFS_SUPER_MAGIC: true,
	0x2fc12fc1:                 true, // zfs
}

// sealableDir reports whether files in d may be sealed.
func sealableDir(d *staging.Dir) bool {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(d.Fd(), &fs); err != nil {
		return false
	}
	return localFS[int64(fs.Type)]
}

// sealFor is the seal of a staged file whose whole content was proved
// after lstat returned fi at time looked; nil when its ctime is too recent.
func (st *stager) sealFor(fi unix.Stat_t, looked time.Time) *ledger.Seal {
	if !st.sealable {
		return nil
	}
	if !time.Unix(fi.Ctim.Unix()).Before(looked.Add(-sealMargin)) {
		return nil
	}
	s := ledger.SealOf(fi)
	return &s
}

// sealed returns the ledger entry of it when its seal still holds: the
// ledger proved the staged blob whole against its name, the source under
// that name has the same size, and the staged file's identity is unchanged.
func (st *stager) sealed(it *fileItem, dst string) (ledger.Entry, bool) {
	if st.opts.Force || !st.sealable {
		return ledger.Entry{}, false
	}
	if _, ok := contentName(it.Rel); !ok {
		return ledger.Entry{}, false
	}
	st.mu.Lock()
	old, known := st.led.Entries[it.Rel]
	st.mu.Unlock()
	if !known || old.Seal == nil || old.Size != it.Size || old.Source != it.SrcRel || (st.s.sha256 && old.SHA256 == "") {
		return ledger.Entry{}, false
	}
	d, name, err := st.dc.Parent(dst, false)
	if err != nil {
		return ledger.Entry{}, false
	}
	fi, err := d.Lstat(name)
	if err != nil || !isReg(fi) || fi.Size != it.Size || !old.Seal.Matches(fi) {
		return ledger.Entry{}, false
	}
	return old, true
}

// proved reports whether a staged blob whose samples matched the source is
// proved whole against its name: data is the source's whole content (nil
// when it was not read whole), sum the full sha256 the entry carries.
func proved(rel string, size int64, data []byte, sum string) bool {
	name, ok := contentName(rel)
	if !ok {
		return false
	}
	if data != nil && int64(len(data)) == size && ledger.SampledBytes(size) == size {
		// Whole-file samples matched: the staged file is these bytes.
		return namedBy(name, data)
	}
	return len(name) == 64 && sum == name
}

// written is a content-named blob this pass wrote: a small one (read
// back whole at the end of the pass to be proved), or a large one whose
// bytes hashed to its name as they were copied, with committed its
// identity right after its rename.
type written struct {
	rel       string
	committed *unix.Stat_t
}

// sealWritten seals the blobs this pass wrote, at its end: each is looked
// at and then proved. A small one is read back whole (from the page cache
// the write left) and proved against its name. A large one was proved by
// its hash as it streamed, before its rename: it is proved still if the
// look finds the identity it had right after that rename (any write since
// moved its ctime). The seal reaches disk only in a ledger saved after the
// filesystem sync that makes the files durable (saveLocked). A file
// changed between the write and the look is then either caught or sealed
// with the identity its change gave it, which the next change moves again;
// a file whose ctime is too recent is left to the next pass (sealFor).
func (st *stager) sealWritten(files []written) {
	if !st.sealable {
		return
	}
	seals := make([]*ledger.Seal, len(files))
	forEach(context.Background(), len(files), metaWorkers, func(_ context.Context, i int) error {
		seals[i] = st.sealOne(files[i])
		return nil
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, w := range files {
		if seals[i] == nil {
			continue
		}
		if e, ok := st.led.Entries[w.rel]; ok && e.Seal == nil {
			e.Seal = seals[i]
			st.led.Entries[w.rel] = e
			st.dirty = true
		}
	}
}

// sealOne is sealWritten's look and proof of one blob: its seal, or nil.
func (st *stager) sealOne(w written) *ledger.Seal {
	name, _ := contentName(w.rel)
	d, base, err := st.dc.Parent(filepath.Join(st.s.mirror, w.rel), false)
	if err != nil {
		return nil
	}
	looked := sealClock()
	fi, err := d.Lstat(base)
	if err != nil || !isReg(fi) {
		return nil
	}
	if w.committed != nil {
		if ledger.SealOf(fi) != ledger.SealOf(*w.committed) {
			return nil
		}
		return st.sealFor(fi, looked)
	}
	fd, err := d.OpenRaw(base, unix.O_RDONLY, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	bp := smallBufs.Get().(*[]byte)
	defer smallBufs.Put(bp)
	var at unix.Stat_t
	data, ok, err := readSmallInto(fd, d.Join(base), *bp, &at)
	if err != nil || !ok || int64(len(data)) != fi.Size || !namedBy(name, data) {
		return nil
	}
	return st.sealFor(fi, looked)
}

// linkSealed reports whether the mirror link l, lstat fi, is sealed with
// l's target: then it needs no readlink.
func (st *stager) linkSealed(l linkItem, fi unix.Stat_t) bool {
	if !st.sealable {
		return false
	}
	st.mu.Lock()
	ls, ok := st.led.Links[l.Rel]
	st.mu.Unlock()
	return ok && ls.Target == l.Target && ls.Seal.Matches(fi)
}

// sealLink records the seal of link l, read back with target l.Target
// after lstat returned fi at time looked.
func (st *stager) sealLink(l linkItem, fi unix.Stat_t, looked time.Time) {
	seal := st.sealFor(fi, looked)
	if seal == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if old, ok := st.led.Links[l.Rel]; ok && old.Target == l.Target && old.Seal == *seal {
		return
	}
	if st.led.Links == nil {
		st.led.Links = map[string]ledger.LinkSeal{}
	}
	st.led.Links[l.Rel] = ledger.LinkSeal{Target: l.Target, Seal: *seal}
	st.dirty = true
}

// madeLink notes a link this pass created or replaced.
func (st *stager) madeLink(l linkItem) {
	st.mu.Lock()
	st.madeLinks = append(st.madeLinks, l)
	if _, ok := st.led.Links[l.Rel]; ok {
		// The old seal named the link that was replaced.
		delete(st.led.Links, l.Rel)
		st.dirty = true
	}
	st.mu.Unlock()
}

// sealMadeLinks seals the links this pass made: each is looked at and read
// back (from the cache its creation left) before its identity is recorded.
func (st *stager) sealMadeLinks() {
	if !st.sealable {
		return
	}
	forEach(context.Background(), len(st.madeLinks), metaWorkers, func(_ context.Context, i int) error {
		l := st.madeLinks[i]
		d, name, err := st.dc.Parent(filepath.Join(st.s.mirror, l.Rel), false)
		if err != nil {
			return nil
		}
		looked := sealClock()
		fi, err := d.Lstat(name)
		if err != nil || !isLink(fi) {
			return nil
		}
		if t, err := d.Readlink(name); err == nil && t == l.Target {
			st.sealLink(l, fi, looked)
		}
		return nil
	})
}

// known plans a pass's snapshot entries from the ledger instead of reading
// them on the NAS. A hub snapshot directory is named by its commit, and the
// files a commit holds, and the blob each of them is, are fixed by that
// name: once a pass has read an entry's link on the NAS (the mirror link
// sealed with its text) and proved the blob it names (the blob sealed),
// later passes take both from the ledger. The NAS is still listed, so an
// entry that appears (a download finished later) or a new revision is read
// as before; a file that must be copied again is resolved and checked on
// the NAS first (needSource). Only the hub's flat layout is planned so
// (the blob at the same path under src), and `verify` and --stage=force
// read everything.
type known struct {
	led    *ledger.Ledger
	sha256 bool
}

// entry returns the link text and the blob's ledger entry of the snapshot
// entry mirrorEntry (REPO/snapshots/REV/PATH) of repo directory dir.
func (k *known) entry(dir, rev, mirrorEntry string) (target string, ent ledger.Entry, ok bool) {
	if k == nil || !hubcache.IsBlobName(rev) {
		return "", ledger.Entry{}, false
	}
	ls, ok := k.led.Links[mirrorEntry]
	if !ok {
		return "", ledger.Entry{}, false
	}
	// The link must be the hub's own shape: as many ".." as mirrorEntry's
	// directory lies below dir, then blobs/NAME.
	up := strings.Count(mirrorEntry[len(dir):], string(filepath.Separator)) - 1
	name := ls.Target
	for i := 0; i < up && ok; i++ {
		name, ok = strings.CutPrefix(name, ".."+string(filepath.Separator))
	}
	if ok {
		name, ok = strings.CutPrefix(name, hubcache.Blobs+string(filepath.Separator))
	}
	if up < 2 || !ok || !hubcache.IsBlobName(name) {
		return "", ledger.Entry{}, false
	}
	blob := dir + string(filepath.Separator) + hubcache.Blobs + string(filepath.Separator) + name
	e, ok := k.led.Entries[blob]
	if !ok || e.Seal == nil || e.Source != blob || (k.sha256 && e.SHA256 == "") {
		return "", ledger.Entry{}, false
	}
	return ls.Target, e, true
}

// needSource resolves and checks on the NAS the source of a file planned
// from the ledger, now that it must be read: as the plan would have (no
// link out of src and the shared roots, a readable regular file).
func (st *stager) needSource(it *fileItem) error {
	final, fi, err := resolve(it.Src)
	if err != nil {
		return dangling(it.Src, final, err)
	}
	if err := st.s.checkInside(it.Src, "source blob", st.s.readRoots()); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("source blob %s resolves to %s, which is not a regular file: fix the source", it.Src, final))
	}
	if err := checkReadable(final, "source blob "+it.Src); err != nil {
		return err
	}
	it.Src, it.SrcRel, it.Size, it.Mode, it.known = final, st.s.srcRel(final), fi.Size(), fi.Mode().Perm(), false
	return nil
}

// checkedBy takes the check of a file the relay compared with the NAS in
// this activity (c) instead of sampling both sides again; ok is false when
// it cannot (the staged file changed since: its identity moved, or a
// full hash is wanted, by verify = "sha256" or because the file is a
// content-addressed blob, that neither c nor the ledger has).
func (st *stager) checkedBy(it *fileItem, dst string, c staging.Checked) (fileState, ledger.Entry, bool) {
	d, name, err := st.dc.Parent(dst, false)
	if err != nil {
		return stCopy, ledger.Entry{}, false
	}
	fi, err := d.Lstat(name)
	if err != nil || !isReg(fi) || fi.Size != it.Size || c.Sampled == "" || ledger.SealOf(fi) != ledger.SealOf(c.Stat) {
		return stCopy, ledger.Entry{}, false // changed since it was checked
	}
	ent := ledger.Entry{Size: it.Size, Sampled: c.Sampled, SHA256: c.SHA256, Source: it.SrcRel, VerifiedAt: time.Now().UTC()}
	st.mu.Lock()
	old, known := st.led.Entries[it.Rel]
	st.mu.Unlock()
	trusted := known && old.Size == ent.Size && old.Sampled == ent.Sampled && old.Source == ent.Source
	if trusted && ent.SHA256 == "" {
		ent.SHA256 = old.SHA256
	}
	if (st.s.sha256 && ent.SHA256 == "") || (it.WantSHA != "" && ent.SHA256 != it.WantSHA) {
		// Not proved whole (a content-addressed blob always must be):
		// checked as any other file.
		return stCopy, ledger.Entry{}, false
	}
	if proved(it.Rel, it.Size, nil, ent.SHA256) {
		ent.Seal = st.sealFor(c.Stat, c.At)
	}
	if trusted {
		return stVerified, ent, true
	}
	return stAdopted, ent, true
}
