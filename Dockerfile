# tether's images for users who build with Docker. The tested path is
# `make images` (go-containerregistry, no Docker daemon; see the README's
# "Install on a cluster"); this file makes images of the same shape:
# a static binary at /<name> as the entrypoint, user 65532:65532, the OCI
# labels, nothing else (FROM scratch).
#
#   docker buildx build --platform linux/amd64,linux/arm64 --target tether-sidecar \
#     --build-arg VERSION=$(make -s version) --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(git log -1 --format=%cI) -t REGISTRY/tether-sidecar:$(make -s version) --push .
#   (and --target tether-injector)

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS TARGETARCH
ARG VERSION=devel
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The same flags as make images; the -X flags are buildinfo.LDFlags.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X github.com/tetherproxy/tether/sidecar/buildinfo.version=$VERSION -X github.com/tetherproxy/tether/sidecar/buildinfo.revision=$REVISION" \
      -o /out/ ./sidecar ./injector

FROM scratch AS tether-injector
ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.version=$VERSION \
      org.opencontainers.image.revision=$REVISION \
      org.opencontainers.image.source=https://github.com/tetherproxy/tether \
      org.opencontainers.image.created=$CREATED
COPY --from=build /out/injector /tether-injector
USER 65532:65532
ENTRYPOINT ["/tether-injector"]

FROM scratch AS tether-sidecar
ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.version=$VERSION \
      org.opencontainers.image.revision=$REVISION \
      org.opencontainers.image.source=https://github.com/tetherproxy/tether \
      org.opencontainers.image.created=$CREATED
COPY --from=build /out/sidecar /tether-sidecar
USER 65532:65532
ENTRYPOINT ["/tether-sidecar"]
