package api

// The API's statuses come from package status. The dashboard's are made when its handler is
// built (below); openapi.json's enums are written by go generate, and TestOpenAPIStatuses fails
// when they are stale. The 3.0 copy is made from openapi.json after them.
//
//go:generate go test -count=1 -run ^TestOpenAPIStatuses$ . -update-openapi-statuses
//go:generate go test -count=1 -run ^TestOpenAPI30$ . -update-openapi30

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"

	"github.com/conveyorq/conveyor/status"
)

// dashboardStatus is what the dashboard's script knows of a status.
type dashboardStatus struct {
	Status   status.Status `json:"status"`
	Word     string        `json:"word"`
	Final    bool          `json:"final"`
	Listable bool          `json:"listable"`
	Gauge    bool          `json:"gauge"`
	Help     string        `json:"help"`
}

// dashboardReason is what the dashboard's script knows of a reason a job waits.
type dashboardReason struct {
	Reason status.Reason `json:"reason"`
	Help   string        `json:"help"`
}

// statusesJS is the dashboard's ui/statuses.js, made from the status list when the handler is
// built: app.js draws its tabs, counts and badges from it, so a new status needs no edit there.
// It carries the reasons a job waits too (status.Reasons), whose help texts the job page and
// the lists show.
func statusesJS(list []status.Info, listable []status.Status) []byte {
	all := make([]dashboardStatus, len(list))
	for i, in := range list {
		all[i] = dashboardStatus{Status: in.Status, Word: cmp.Or(in.Word, string(in.Status)), Final: in.Final,
			Listable: in.Listable, Gauge: in.Gauge, Help: in.Help}
	}
	var reasons []dashboardReason
	for _, r := range status.Reasons() {
		reasons = append(reasons, dashboardReason{Reason: r, Help: r.Help()})
	}
	// Marshal escapes <, > and &, so no text of the list can end the script.
	b, err := json.Marshal(struct {
		All      []dashboardStatus `json:"all"`
		Listable []status.Status   `json:"listable"`
		Reasons  []dashboardReason `json:"reasons"`
	}{all, listable, reasons})
	if err != nil {
		panic(err) // strings and booleans always marshal
	}
	return []byte("// The job statuses, made by the server from its list (package status).\n" +
		"'use strict';\nwindow.CONVEYOR_STATUSES = " + string(b) + ";\n")
}

// statusesCSS is the dashboard's ui/statuses.css: each status's colour, by its tone.
func statusesCSS(list []status.Info) []byte {
	var b bytes.Buffer
	b.WriteString("/* The job statuses' colours, made by the server from its list (package status). */\n")
	for _, in := range list {
		fmt.Fprintf(&b, ".st-%s { color: var(--%s); }\n", in.Status, in.Tone)
	}
	return b.Bytes()
}
