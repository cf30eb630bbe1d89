# Conveyor's container image: the static `conveyor` binary on distroless, run as nonroot.
#
#   docker build -t conveyor .
#   docker run --rm -e CONVEYOR_REDIS_URL=redis://redis-host:6379/0 conveyor worker --queue default
#   docker compose up --build     # the whole demo: docker-compose.yml (README.md, "With Docker")
#
# Builders: this file builds with BuildKit and with the classic builder (DOCKER_BUILDKIT=0),
# both tried for real on Docker 20.10 with no image registry reachable. That is why it has:
#   - no `# syntax=` line: the classic builder ignores it, but BuildKit then pulls the
#     docker/dockerfile frontend image from Docker Hub before anything else, and fails where no
#     registry answers. The frontend built into the engine reads everything used here.
#   - no `RUN --mount=type=cache`: the classic builder refuses the flag ("the --mount option
#     requires BuildKit"). Layers do the caching instead, with both builders: go.mod and go.sum
#     are copied first and `go mod download` is its own layer (until they change), and the
#     third-party packages are compiled into the build cache in a layer keyed by their list
#     (stage deps), so a change to the project's own code recompiles only the project.
#
# Modules come through the Go module proxy (GOPROXY build arg; sums are checked against go.sum).

# modules: the module cache, one layer that lasts until the go.mod or go.sum files change.
FROM golang:1.26-bookworm AS modules
ARG GOPROXY=https://proxy.golang.org,direct
ENV CGO_ENABLED=0 \
    GOPROXY=${GOPROXY} \
    GOFLAGS=-mod=readonly
WORKDIR /src
# The binary is the module cmd/conveyor; a workspace of it and the library (the one beside it,
# not the version its go.mod requires) builds it. The repository's go.work also names the e2e and
# bench modules, which stay out of the build context, so the image makes its own.
COPY go.mod go.sum ./
COPY cmd/conveyor/go.mod cmd/conveyor/go.sum ./cmd/conveyor/
# The replace names the version cmd/conveyor's go.mod requires, read with the shell alone: the
# CI's stand-in base image has no awk.
RUN go work init . ./cmd/conveyor \
 && v=$(while read -r m ver rest; do [ "$m" != github.com/conveyorq/conveyor ] || echo "$ver"; done < cmd/conveyor/go.mod) \
 && go work edit -replace "github.com/conveyorq/conveyor@$v=./" \
 && go mod download && go mod verify

# deplist: the non-main packages that cmd/conveyor imports (third-party; std comes with them).
FROM modules AS deplist
COPY . .
RUN go list -deps -f '{{if not .Standard}}{{if not .Module.Main}}{{.ImportPath}}{{end}}{{end}}' \
      ./cmd/conveyor | sort >/deps.txt

# deps: those packages compiled into the build cache. COPY --from is cached by content, so this
# layer lasts while the list of imported packages (and go.mod) stays the same: a change to the
# project's own code recompiles only the project's packages.
FROM modules AS deps
COPY --from=deplist /deps.txt /deps.txt
RUN xargs -r go build -trimpath </deps.txt

FROM deps AS build
COPY . .
RUN go build -trimpath -buildvcs=false -ldflags "-s -w" -o /out/conveyor ./cmd/conveyor \
 && /out/conveyor --help >/dev/null

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=unknown
ARG LICENSES=NOASSERTION
LABEL org.opencontainers.image.title="conveyor" \
      org.opencontainers.image.description="Conveyor: background jobs on Redis Streams (worker, serve, publish, status, stats, dead, demo)" \
      org.opencontainers.image.source="https://github.com/conveyorq/conveyor" \
      org.opencontainers.image.url="https://github.com/conveyorq/conveyor" \
      org.opencontainers.image.licenses="${LICENSES}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/conveyor /usr/local/bin/conveyor
USER 65532:65532
# Configuration: CONVEYOR_* variables (CONVEYOR_REDIS_URL, CONVEYOR_API_TOKEN, ...: README.md,
# "With Docker"; each flag's help names its variable) and flags, which win over them.
# `conveyor serve`'s port in docker-compose.yml (CONVEYOR_API_ADDR=:8080): the API, the
# dashboard and /metrics. Workers listen on nothing.
EXPOSE 8080
ENTRYPOINT ["conveyor"]
CMD ["--help"]
