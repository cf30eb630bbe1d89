package pipeline

import (
	_ "embed"

	"github.com/conveyorq/conveyor/internal/script"
)

var (
	//go:embed enqueue.lua
	enqueueSrc string
	//go:embed enqueue1.lua
	enqueue1Src string
	//go:embed finish.lua
	finishSrc string
	//go:embed get.lua
	getSrc string
	//go:embed cancel.lua
	cancelSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed replay.lua
	replaySrc string
	//go:embed purge.lua
	purgeSrc string

	enqueueScript  = script.New(enqueueSrc)
	enqueue1Script = script.New(enqueue1Src)
	finishScript   = script.New(finishSrc)
	getScript      = script.New(getSrc)
	cancelScript   = script.New(cancelSrc)
	releaseScript  = script.New(releaseSrc)
	replayScript   = script.New(replaySrc)
	purgeScript    = script.New(purgeSrc)
)
