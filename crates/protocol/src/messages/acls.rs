//! DescribeAcls (key 29), CreateAcls (key 30), DeleteAcls (key 31).
use crate::message;

message! {
    pub struct DescribeAclsRequest {
        resource_type_filter: i8 => [0, 99],
        resource_name_filter: Option<String> => [0, 99],
        pattern_type_filter: i8 = 3 => [1, 99],
        principal_filter: Option<String> => [0, 99],
        host_filter: Option<String> => [0, 99],
        operation: i8 => [0, 99],
        permission_type: i8 => [0, 99],
    }
}

message! {
    pub struct AclDescription {
        principal: String => [0, 99],
        host: String => [0, 99],
        operation: i8 => [0, 99],
        permission_type: i8 => [0, 99],
    }
}

message! {
    pub struct DescribeAclsResource {
        resource_type: i8 => [0, 99],
        resource_name: String => [0, 99],
        pattern_type: i8 = 3 => [1, 99],
        acls: Vec<AclDescription> => [0, 99],
    }
}

message! {
    pub struct DescribeAclsResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        resources: Vec<DescribeAclsResource> => [0, 99],
    }
}

message! {
    pub struct AclCreation {
        resource_type: i8 => [0, 99],
        resource_name: String => [0, 99],
        resource_pattern_type: i8 = 3 => [1, 99],
        principal: String => [0, 99],
        host: String => [0, 99],
        operation: i8 => [0, 99],
        permission_type: i8 => [0, 99],
    }
}

message! {
    pub struct CreateAclsRequest {
        creations: Vec<AclCreation> => [0, 99],
    }
}

message! {
    pub struct AclCreationResult {
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
    }
}

message! {
    pub struct CreateAclsResponse {
        throttle_time_ms: i32 => [0, 99],
        results: Vec<AclCreationResult> => [0, 99],
    }
}

message! {
    pub struct DeleteAclsFilter {
        resource_type_filter: i8 => [0, 99],
        resource_name_filter: Option<String> => [0, 99],
        pattern_type_filter: i8 = 3 => [1, 99],
        principal_filter: Option<String> => [0, 99],
        host_filter: Option<String> => [0, 99],
        operation: i8 => [0, 99],
        permission_type: i8 => [0, 99],
    }
}

message! {
    pub struct DeleteAclsRequest {
        filters: Vec<DeleteAclsFilter> => [0, 99],
    }
}

message! {
    pub struct DeleteAclsMatchingAcl {
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        resource_type: i8 => [0, 99],
        resource_name: String => [0, 99],
        pattern_type: i8 = 3 => [1, 99],
        principal: String => [0, 99],
        host: String => [0, 99],
        operation: i8 => [0, 99],
        permission_type: i8 => [0, 99],
    }
}

message! {
    pub struct DeleteAclsFilterResult {
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        matching_acls: Vec<DeleteAclsMatchingAcl> => [0, 99],
    }
}

message! {
    pub struct DeleteAclsResponse {
        throttle_time_ms: i32 => [0, 99],
        filter_results: Vec<DeleteAclsFilterResult> => [0, 99],
    }
}
