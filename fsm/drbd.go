package fsm

// DRBDDevice is what a node reports of a drbd disk's device there (its
// line of /proc/drbd): the node agents answer it in an instance's status,
// the jobs wait on it for a resync and show it in an instance's info. It
// is not part of the replicated state.
type DRBDDevice struct {
	// Minor is the device's minor (/dev/drbd<minor>).
	Minor int `json:"minor"`
	// Connection is DRBD's connection state (cs:): Connected,
	// StandAlone, WFConnection, SyncSource, SyncTarget, ...
	Connection string `json:"connection"`
	// Role and PeerRole (ro:) are Primary, Secondary or Unknown.
	Role     string `json:"role"`
	PeerRole string `json:"peer_role"`
	// Disk and PeerDisk (ds:) are UpToDate, Inconsistent, Outdated,
	// Diskless, DUnknown, ...
	Disk     string `json:"disk"`
	PeerDisk string `json:"peer_disk"`
	// SyncPercent is a resync's progress (nil: none under way), and
	// EstimatedSeconds its remaining time as DRBD estimates it (nil:
	// unknown).
	SyncPercent      *float64 `json:"sync_percent,omitempty"`
	EstimatedSeconds *int     `json:"estimated_seconds,omitempty"`
}

// DRBD connection and disk states the jobs act on.
const (
	DRBDConnected = "Connected"
	DRBDUpToDate  = "UpToDate"
)

// InSync reports whether both ends are connected and up to date.
func (d DRBDDevice) InSync() bool {
	return d.Connection == DRBDConnected && d.Disk == DRBDUpToDate && d.PeerDisk == DRBDUpToDate
}

// LocalOK reports whether this end's data is usable (Ganeti's ldisk
// status okay): up to date, or the target of a resync under way is not.
func (d DRBDDevice) LocalOK() bool {
	return d.Disk == DRBDUpToDate
}
