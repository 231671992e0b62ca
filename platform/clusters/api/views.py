"""Operators' view of broker clusters: register, list, change, and render Kubernetes manifests."""

from __future__ import annotations

from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView
from tideway_server.clusters.choices import ProvisionerKind
from tideway_server.clusters.models import Cluster
from tideway_server.clusters.provisioning import ClusterSpec, KubernetesProvisioner
from tideway_server.controlplane.api.errors import not_found
from tideway_server.controlplane.errors import ActionError
from tideway_server.tenants import audit

TAG = ["operators"]


class ClusterSerializer(serializers.ModelSerializer):
    name = serializers.RegexField(r"^[a-z0-9][a-z0-9-]{0,62}$", max_length=63)
    provisioner = serializers.ChoiceField(ProvisionerKind.choices, default=ProvisionerKind.LOCAL)
    spec = serializers.DictField(required=False, help_text="brokers, controllers, image, storage_gib, cpu, memory, ...")
    used_partitions = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = ["name", "region", "bootstrap", "max_partitions", "dedicated", "provisioner", "spec", "used_partitions", "created"]
        read_only_fields = ["created"]

    def validate_spec(self, value: dict) -> dict:
        try:
            ClusterSpec.from_dict(self.initial_data.get("name", "cluster"), value)
        except (TypeError, ValueError) as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value

    def get_used_partitions(self, cluster: Cluster) -> int:
        from tideway_server.topics.placement import used_partitions

        return used_partitions(cluster)


def _cluster(name: str) -> Cluster:
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise not_found(f"cluster {name!r}")
    return cluster


class ClusterListView(APIView):
    operator_only = True

    @extend_schema(responses=ClusterSerializer(many=True), tags=TAG)
    def get(self, request):
        return Response(ClusterSerializer(Cluster.objects.order_by("name"), many=True).data)

    @extend_schema(request=ClusterSerializer, responses={201: ClusterSerializer}, tags=TAG, summary="Register a cluster")
    def post(self, request):
        body = ClusterSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        with transaction.atomic():
            if Cluster.objects.filter(name=body.validated_data["name"]).exists():
                raise ActionError("cluster_exists", f"cluster {body.validated_data['name']!r} already exists")
            cluster = body.save()
            audit.record(None, request.auth.actor, "cluster.register", cluster.name, region=cluster.region,
                         provisioner=cluster.provisioner, spec=cluster.spec)
        return Response(ClusterSerializer(cluster).data, status=status.HTTP_201_CREATED)


class ClusterDetailView(APIView):
    operator_only = True

    @extend_schema(responses=ClusterSerializer, tags=TAG)
    def get(self, request, name: str):
        return Response(ClusterSerializer(_cluster(name)).data)

    @extend_schema(request=ClusterSerializer, responses=ClusterSerializer, tags=TAG)
    def patch(self, request, name: str):
        cluster = _cluster(name)
        body = ClusterSerializer(cluster, data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        if body.validated_data.get("name", name) != name:
            raise ActionError("immutable_setting", "a cluster's name cannot change")
        with transaction.atomic():
            cluster = body.save()
            audit.record(None, request.auth.actor, "cluster.update", name, **{k: v for k, v in request.data.items() if k != "name"})
        return Response(ClusterSerializer(cluster).data)


class ClusterManifestsView(APIView):
    """The Kubernetes manifests that run this cluster (YAML, for kubectl apply -f -)."""

    operator_only = True

    @extend_schema(responses={200: str}, tags=TAG)
    def get(self, request, name: str):
        from django.http import HttpResponse

        cluster = _cluster(name)
        try:
            spec = ClusterSpec.from_dict(cluster.name, {**cluster.spec, "region": cluster.region})
        except (TypeError, ValueError) as exc:
            raise ActionError("invalid_spec", f"cluster {name!r} has an invalid spec: {exc}") from None
        return HttpResponse(KubernetesProvisioner().render(spec), content_type="application/yaml")
